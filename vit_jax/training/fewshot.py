"""Few-shot linear evaluation: the ViT paper's measure of a frozen representation.

The pre-logit features of a split (what the head sees: class token, GAP or MAP as the model
pools) are extracted by a jitted function over the 1-D data mesh from the padded, masked
batches of `input_pipeline.get_eval_data`, so every image counts once, and put back in the split's
order whatever the number of devices or processes: the numbers depend only on the params, the
data and the seeds (the same on 1 or N devices, and after a resume). `least_squares` fits and
scores the linear maps; this module extracts, checks the splits, and runs it during training
(`make_hook`) and in the tool (`run_dataset`).
"""

import dataclasses
import os
import time
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from jax.sharding import Mesh

from vit_jax import input_pipeline
from vit_jax.training import least_squares
from vit_jax.training import parallel

@dataclasses.dataclass(frozen=True)
class FewShot:
  """What few-shot evaluation measures, and when (`config.fewshot`; defaults in `config_lib`).

  Attributes:
    datasets: TFDS names or image folders; () = off.
    every: steps between evaluations during training; 0 = at each eval.
    shots: images per class the linear map is fitted on, one result each.
    seeds: draws of the shots (seeds 0..n-1).
    train_split: the split the shots and held-out images are drawn from.
    test_split: the split the accuracy is measured on.
    l2_regs: the regularisers tried (the best on the held-out images is used); one = fixed.
    holdout: held-out training images per class that choose the regulariser.
  """
  datasets: Tuple[str, ...]
  every: int
  shots: Tuple[int, ...]
  seeds: int
  train_split: str
  test_split: str
  l2_regs: Tuple[float, ...]
  holdout: int


def make_representation_fn(model: Any, mesh: Mesh, params_sharding: Any = None) -> Callable:
  """Jitted `fn(params, batch) -> (features, labels, mask)` on the mesh, outputs replicated.

  The features are the model's own output without a head (`num_classes=0`: every family
  returns what its head would see), with the same param tree (the head's params are unused).
  """
  headless = model.clone(num_classes=0)

  def represent(params, batch):
    features = headless.apply({'params': params}, batch['image'], train=False)
    if features.ndim != 2:  # E.g. classifier='unpooled': a head per token, no one embedding.
      raise ValueError(f'the model gives {features.shape[1:]} features per image, not one '
                       'vector (an unpooled classifier?); few-shot evaluation needs a pooled '
                       'model (classifier token, gap or map).')
    return features.astype(jnp.float32), batch['label'], batch['mask']

  replicated = parallel.replicated(mesh)
  params_sharding = replicated if params_sharding is None else params_sharding
  return jax.jit(represent, in_shardings=(params_sharding, parallel.data_sharded(mesh)),
                 out_shardings=replicated)


def extract(represent: Callable, params: Any, data: input_pipeline.EvalData,
            mesh: Mesh) -> least_squares.Features:
  """Features of every (unmasked) image of `data`, in the split's order."""
  rows = []
  for batch in data.batches():
    local = {'image': batch['image'], 'mask': batch['mask'],
             'label': np.argmax(batch['label'], axis=-1).astype(np.int32)}
    rows.append(parallel.to_host(represent(params, parallel.put_batch(local, mesh))))
  shares = data.shares or (data.num_examples,)
  x, labels, mask = (in_split_order([r[i] for r in rows], shares, data.strided)
                     for i in range(3))
  keep = mask > 0
  return least_squares.Features(x=x[keep], labels=labels[keep].astype(np.int64))


def in_split_order(batches: Sequence[np.ndarray], shares: Sequence[int],
                   strided: bool) -> np.ndarray:
  """Global batches (each process's local batch in turn) → the split's rows, in its order.

  Process p's rows, in the order it read them, are its share's examples followed by padding:
  example i of share p is example offset_p + i of the split for contiguous shares, p + i * n
  for strided ones (`input_pipeline.EvalData.strided`).
  """
  n = len(shares)
  per_process = np.concatenate([b.reshape(n, -1, *b.shape[1:]) for b in batches], axis=1)
  offsets = np.cumsum([0, *shares[:-1]])
  positions = np.concatenate([p + n * np.arange(k) if strided else offsets[p] + np.arange(k)
                              for p, k in enumerate(shares)])
  real = np.concatenate([per_process[p, :k] for p, k in enumerate(shares)])
  return real[np.argsort(positions, kind='stable')]


def dataset_data(data: input_pipeline.Data, dataset: str) -> input_pipeline.Data:
  """`data` reading `dataset` (its data dirs, crop, mean/std and eval batch kept)."""
  return dataclasses.replace(data, dataset=dataset)


def metric_name(dataset: str, shots: int) -> str:
  """`fewshot/<dataset>_<k>shot`; a folder is named by its last path component."""
  name = os.path.basename(os.path.normpath(dataset)) if os.path.isdir(dataset) else dataset
  return f'fewshot/{name}_{shots}shot'


@dataclasses.dataclass(frozen=True)
class FlagNames:
  """How the user sets each few-shot setting: what a refusal tells them to change."""
  datasets: str = '--config.fewshot.datasets'
  shots: str = '--config.fewshot.shots'
  l2_regs: str = '--config.fewshot.l2_regs'
  holdout: str = '--config.fewshot.holdout'
  train_split: str = '--config.fewshot.train_split'
  test_split: str = '--config.fewshot.test_split'


def config_flags(prefix: str = '--config.') -> FlagNames:
  """A training config's flags (`--config.fewshot.shots`; a stage's: `--config.finetune.`)."""
  return FlagNames(**{field.name: f'{prefix}fewshot.{field.name}'
                      for field in dataclasses.fields(FlagNames)})


CONFIG_FLAGS = config_flags()  # A one-stage training run's.


def check_splits(data: input_pipeline.Data, train_split: str, test_split: str,
                 flags: FlagNames = CONFIG_FLAGS) -> None:
  """Refuses a few-shot training split that shares images with its test split."""
  shared = input_pipeline.split_overlap(data, train_split, test_split)
  if shared:
    raise ValueError(
        f'few-shot {flags.train_split}={train_split} and {flags.test_split}={test_split} of '
        f'{data.dataset} share {shared} images: shots would be drawn from the test split. '
        f'Make them disjoint, e.g. {flags.train_split}=train[:90%] '
        f'{flags.test_split}=train[90%:].')


def _sizes(class_names: Sequence[str], counts: np.ndarray, which: np.ndarray) -> str:
  """`'cat' 4, 'dog' 6` for the classes `which` selects, the smallest first (at most 5)."""
  picked = [i for i in np.argsort(counts, kind='stable') if which[i]]
  shown = ', '.join(f'{class_names[i]!r} {counts[i]}' for i in picked[:5])
  return shown + (f' and {len(picked) - 5} more' if len(picked) > 5 else '')


def check_requirements(where: str, class_names: Sequence[str], counts: np.ndarray,
                       num_test: int, settings: FewShot,
                       flags: FlagNames = CONFIG_FLAGS) -> None:
  """Refuses, in one line naming what to change, a dataset few-shot evaluation cannot score.

  Args:
    where: the dataset, as the messages name it.
    class_names: its classes.
    counts: images of each class in the few-shot training split.
    num_test: images of the test split.
    settings: shots, l2_regs, holdout and the split names.
    flags: how the user sets them.

  Raises:
    ValueError: fewer than 2 classes (every prediction right), an empty test split, a class
      with fewer images than the most shots, or a regulariser grid with no held-out image.
  """
  fs, prefix = settings, f'few-shot on {where}: '
  problem = input_pipeline.too_few_classes(tuple(class_names))
  if problem:
    raise ValueError(f'{prefix}{problem}: a linear classifier needs at least 2 classes to be '
                     f'scored; name a dataset of 2 or more classes in {flags.datasets}.')
  if not num_test:
    raise ValueError(f'{prefix}{flags.test_split}={fs.test_split} has no images; give a test '
                     'split with images.')
  shots, counts = tuple(int(k) for k in fs.shots), np.asarray(counts)
  most, smallest = max(shots), int(counts.min())
  shots_flag = f'{flags.shots}={",".join(str(k) for k in shots)}'
  if smallest < most:
    short = counts < most
    who = (f'every class of {fs.train_split} has' if short.all() else
           f'{int(short.sum())} of {len(counts)} classes of {fs.train_split} have')
    fewer = ','.join(str(k) for k in shots if k <= smallest)
    fix = (f'use {flags.shots}={fewer}' if fewer else
           f'use at most {smallest} shots' if smallest else f'use a {flags.train_split} that '
           'holds images of every class')
    raise ValueError(f'{prefix}{who} fewer images than the {most} shots of {shots_flag}: '
                     f'{_sizes(class_names, counts, short)}; {fix} (or a larger '
                     f'{flags.train_split}).')
  if len(fs.l2_regs) > 1 and (not fs.holdout or int(counts.max()) <= most):
    why = (f'{flags.holdout}=0' if not fs.holdout else
           f'every class of {fs.train_split} has {int(counts.max())} images or fewer, all of '
           f'them shots')
    raise ValueError(f'{prefix}no held-out training image to choose the L2 regulariser on at '
                     f'{most} shots ({why}); give one fixed value, e.g. {flags.l2_regs}=1024, '
                     f'use fewer shots ({shots_flag}) or a larger {flags.train_split}.')


def check_dataset(fs: FewShot, data: input_pipeline.Data, dataset: str,
                  flags: FlagNames = CONFIG_FLAGS) -> None:
  """`check_splits` and `check_requirements` for one few-shot dataset, before any image is read
  (its listing: the labels of the training split, the size of the test split); `data` gives
  the input settings (data dirs)."""
  data = dataset_data(data, dataset)
  check_splits(data, fs.train_split, fs.test_split, flags)
  names, counts = input_pipeline.class_counts(data, fs.train_split)
  check_requirements(dataset, names, counts, input_pipeline.split_size(data, fs.test_split),
                     fs, flags)


def check_datasets(fs: FewShot, data: input_pipeline.Data,
                   flags: FlagNames = CONFIG_FLAGS) -> None:
  """`check_dataset` for every dataset of `fs.datasets` (a training run's)."""
  for dataset in fs.datasets:
    check_dataset(fs, data, dataset, flags)


@dataclasses.dataclass(frozen=True)
class DatasetResult:
  """Few-shot results on one dataset and what they were measured on.

  Attributes:
    results: one `least_squares.ShotResult` per number of shots.
    num_train: images of the training split (the pool the shots are drawn from).
    num_test: test images, each counted once.
    feature_dim: width of the pre-logit features.
    seconds: wall time of the extraction and the fits.
  """
  results: Tuple[least_squares.ShotResult, ...]
  num_train: int
  num_test: int
  feature_dim: int
  seconds: float


def run_dataset(fs: FewShot, data: input_pipeline.Data, dataset: str, represent: Callable,
                params: Any, mesh: Mesh) -> DatasetResult:
  """Few-shot results of `params` on one dataset, per `fs` (splits, shots, seeds, l2_regs,
  holdout) and the eval input settings of `data` (crop, mean/std, batch_eval)."""
  start = time.time()
  data = dataset_data(data, dataset)
  check_splits(data, fs.train_split, fs.test_split)
  num_classes = input_pipeline.num_classes(data)
  train = extract(represent, params, input_pipeline.get_eval_data(data, fs.train_split), mesh)
  test = extract(represent, params, input_pipeline.get_eval_data(data, fs.test_split), mesh)
  results = least_squares.evaluate_features(train, test, num_classes, fs.shots, fs.seeds,
                                            fs.l2_regs, fs.holdout)
  return DatasetResult(results=tuple(results), num_train=len(train.labels),
                       num_test=len(test.labels), feature_dim=train.x.shape[1],
                       seconds=time.time() - start)


def make_hook(fs: FewShot, data: input_pipeline.Data, model: Any, mesh: Mesh,
              params_sharding: Any = None) -> Optional[Callable[[Any, int], Dict[str, float]]]:
  """The train loop's few-shot evaluation `hook(params, step) -> scalars`, or None when
  `fs.datasets` is empty. Scalars: `fewshot/<dataset>_<k>shot` (mean over seeds)."""
  if not fs.datasets:
    return None
  for dataset in fs.datasets:  # A bad name or split fails before training, not steps later.
    check_splits(dataset_data(data, dataset), fs.train_split, fs.test_split)
  represent = make_representation_fn(model, mesh, params_sharding)

  def hook(params, step: int) -> Dict[str, float]:
    scalars = {}
    for dataset in fs.datasets:
      measured = run_dataset(fs, data, dataset, represent, params, mesh)
      for r in measured.results:
        scalars[metric_name(dataset, r.shots)] = r.mean
      logging.info('Step %d: few-shot %s: %s (%.1fs)', step, dataset, ', '.join(
          f'{r.shots}-shot {100 * r.mean:.2f}±{100 * r.std:.2f}%' for r in measured.results),
          measured.seconds)
    return scalars

  return hook


def is_due(step: int, fs: FewShot, eval_every: int, total: int) -> bool:
  """Whether the few-shot evaluation runs after `step`: every `fs.every` steps (0: every
  `eval_every`, at each eval) and at the last step."""
  every = fs.every or eval_every
  return step == total or bool(every and step % every == 0)
