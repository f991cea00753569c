"""Input pipelines: a TFDS dataset or a folder of images → numpy batches for this process.

The entry points the official code has: `get_dataset_info`, `get_train_data`, `get_eval_data`;
they take a `Data` (what the config's dataset, pp and batch fields say, read once by
`vit_jax.training.settings.data`), not the config.
Train data is an infinite stream that is a function of `Data.seed` and the position in it,
so a run resumes exactly (`data/stream.py`): every random choice (crop, flip, RandAugment,
random erasing, `data/augment.py`) comes from stateless ops seeded by the example's position
(Mixup needs the global batch: it runs in the train step). Eval data covers its split exactly
once: the last batch is padded and carries a `mask`, and every process yields the same number of
batches so collective eval steps never wait on a process that has run out.

Sources (`data/sources.py`): TFDS datasets (`data/tfds_source.py`; prepared as ArrayRecord they
are read by index, see docs/input_pipeline.md) and image folders (`data/folder_source.py`:
`<root>/train/<class>/*.jpg|png` plus `test/`, `val/` or `validation/`; split strings in TFDS
syntax). Train and eval splits that share an example are an error. A file whose JPEG scan or PNG
chunks end early is found when read, logged (how many, and its name) and replaced by the next
record of the stream (train) or masked out (eval); bytes after the end (camera trailers) are
fine. Images are decoded to 3 channels (grayscale repeated, alpha dropped) and normalised by
`data/image_ops.py`, the same ops the tools run on single files.
"""

import dataclasses
import functools
import os
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

import jax
import numpy as np
import tensorflow as tf
from absl import logging

from vit_jax.data import augment
from vit_jax.data import folder_source
from vit_jax.data import image_ops
from vit_jax.data import image_check
from vit_jax.data import sources
from vit_jax.data import stream

Batch = Dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class Data:
  """What a run reads, how it is augmented and batched (defaults in `config_lib`).

  Attributes:
    dataset: a TFDS name or a folder of images (`config.dataset`).
    tfds_data_dir: TFDS's data_dir, None for its default (`config.tfds_data_dir`).
    tfds_manual_dir: a folder with the dataset's files (`config.tfds_manual_dir`).
    sharding: 'split' or 'stream' (`config.data_sharding`, see `stream.sharding`).
    train: the train split (`config.pp.train`, TFDS slicing syntax).
    test: the eval split (`config.pp.test`).
    val: a validation split evaluated beside it, '' for none (`config.pp.val`).
    train_eval: a subset of `train` evaluated as `test` is, '' for none (`config.pp.train_eval`).
    crop: the square input side (`config.pp.crop`).
    mean: per-channel input mean of the [0, 1] image (`config.pp.mean`).
    std: per-channel input std (`config.pp.std`).
    uint8_batches: train batches as uint8, normalised in the step (`config.pp.uint8_batches`).
    augment: the train augmentation (`config.pp.train_aug`, `area_min`, `randaug`,
      `random_erase`).
    batch: the global train batch (`config.batch`).
    batch_eval: the global eval batch (`config.batch_eval`).
    shuffle_buffer: the shuffle buffer of sources without random access
      (`config.shuffle_buffer`).
    seed: the seed of the data order and the augmentation (`config.seed`).
    prefetch: train batches kept ready (`config.prefetch`).
    autotune: tf.data autotuning of the train pipeline (`config.data_autotune`).
  """
  dataset: str
  tfds_data_dir: Optional[str]
  tfds_manual_dir: Optional[str]
  sharding: str
  train: str
  test: str
  val: str
  train_eval: str
  crop: int
  mean: Sequence[float]
  std: Sequence[float]
  uint8_batches: bool
  augment: augment.Augment
  batch: int
  batch_eval: int
  shuffle_buffer: int
  seed: int
  prefetch: int
  autotune: bool


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
  """What the model and the schedule need to know about the configured splits.

  Attributes:
    num_classes: Size of the one-hot labels.
    num_train_examples: Examples in `Data.train`, over all processes.
    num_test_examples: Examples in `Data.test`, over all processes.
    class_names: Name of each class index.
  """
  num_classes: int
  num_train_examples: int
  num_test_examples: int
  class_names: Tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class EvalData:
  """This process's share of the eval split, in padded, masked batches.

  Attributes:
    num_examples: Real (unpadded) examples of this process.
    num_batches: Batches `batches()` yields; the same on every process.
    dataset: The batched `tf.data.Dataset` behind `batches()`.
    shares: Examples of each process (this one reads shares[jax.process_index()]).
    strided: Whether process p holds examples p, p + n, ... of the split (else a contiguous
      range), so that rows gathered from every process can be put back in the split's order.
    locate: Batch k → the file no decoder reads that failed it (`stream.eval_locator`).
  """
  num_examples: int
  num_batches: int
  dataset: tf.data.Dataset
  shares: Tuple[int, ...] = ()
  strided: bool = False
  locate: Optional[Callable[[int], Optional[str]]] = None

  def batches(self) -> Iterator[Batch]:
    """A fresh pass: {'image', 'label' (one-hot), 'mask' (1 real, 0 padding)} numpy dicts."""
    return stream.numpy_batches(self.dataset, self.locate)


class SplitOverlapError(ValueError):
  """config.pp.train and config.pp.test share examples: accuracy on training images."""


def get_dataset_info(data: Data) -> DatasetInfo:
  """Class names and the sizes of `data.train` and `data.test` (all processes).

  Raises:
    ValueError: if a split is empty, or an eval example is also a train example (accuracy on
      training images).
  """
  source = _open(data)
  train, test = data.train, data.test
  info = DatasetInfo(
      num_classes=len(source.class_names),
      num_train_examples=sum(source.split(train).shares),
      num_test_examples=sum(source.split(test).shares),
      class_names=source.class_names)
  for spec, count in ((train, info.num_train_examples), (test, info.num_test_examples)):
    if not count:  # E.g. the held-out 2% of a train/ folder of fewer than 50 images.
      raise ValueError(
          f'{source.describe(spec)} has no examples: nothing to train on or evaluate. Give it '
          'some, e.g. --config.pp.train=train[:80%] --config.pp.test=train[80%:] (or add a '
          'test/ folder).')
  _check_val_disjoint(source, data)
  shared = source.overlap(train, test)
  if shared:
    raise SplitOverlapError(
        f'config.pp.train={train!r} and config.pp.test={test!r} share {shared} of the '
        f'{info.num_test_examples} eval examples of {data.dataset}: the accuracy would be '
        'measured on training images. Make them disjoint, e.g. --config.pp.train=train[:98%] '
        '--config.pp.test=train[98%:] (or give the folder a test/ folder).')
  logging.info('Training on %s: %d examples; evaluating on %s: %d examples (disjoint).',
               source.describe(train), info.num_train_examples, source.describe(test),
               info.num_test_examples)
  return info


def num_classes(data: Data) -> int:
  """Classes of `data.dataset` (its label names), without reading any split."""
  return len(_open(data).class_names)


def class_counts(data: Data, spec: str) -> Tuple[Tuple[str, ...], np.ndarray]:
  """(class names, images of each class) of split `spec` of `data.dataset`, all processes.

  Reads the labels only: a folder's listing, a TFDS split's records (images not decoded).
  """
  source = _open(data)
  split = source.split(spec, per_process=False)
  labels = split.make().map(sources.as_written(lambda example: example['label']),
                            num_parallel_calls=tf.data.AUTOTUNE).batch(4096)
  counts = np.zeros(len(source.class_names), np.int64)
  for batch in labels.as_numpy_iterator():
    counts += np.bincount(batch, minlength=len(counts))[:len(counts)]
  return source.class_names, counts


def split_size(data: Data, spec: str) -> int:
  """Examples of split `spec` of `data.dataset`, all processes (only its size is read)."""
  return sum(_open(data).split(spec, per_process=False).shares)


def too_few_classes(class_names: Tuple[str, ...]) -> Optional[str]:
  """Why a classifier can neither be trained nor scored on these classes, or None (2 or more).

  With one class every prediction is right: loss 0 and accuracy 1 say nothing.
  """
  if len(class_names) >= 2:
    return None
  if tuple(class_names) == (folder_source.UNLABELED,):
    return 'it has no class folders (its images are one unlabeled class)'
  named = ', '.join(repr(name) for name in class_names)
  return f'it has {len(class_names)} class' + (f' ({named})' if named else 'es')


def split_overlap(data: Data, train: str, test: str) -> int:
  """Examples of `data.dataset` that split strings `train` and `test` share."""
  return _open(data).overlap(train, test)


def dataset_identity(data: Data) -> Dict[str, Any]:
  """What `data` trains and evaluates on, wherever it is stored: the source's identity
  (`sources.Source.identity`) and the split strings read (`config.pp.*`)."""
  identity = dict(_open(data).identity())
  splits = dict(train=data.train, test=data.test, val=data.val, train_eval=data.train_eval)
  identity['splits'] = {name: spec for name, spec in splits.items() if spec}
  return identity


def _check_val_disjoint(source: sources.Source, data: Data) -> None:
  """pp.val guides choices made after seeing results: it may share no image with pp.train."""
  if not data.val:
    return
  shared = source.overlap(data.train, data.val)
  if shared:
    raise SplitOverlapError(
        f'config.pp.train={data.train!r} and config.pp.val={data.val!r} share {shared} '
        'examples: validation accuracy would be measured on training images. Carve them apart, '
        'e.g. --config.pp.train=train[:90%] --config.pp.val=train[90%:].')


def get_train_data(data: Data, *, start_batch: int = 0) -> Iterator[Batch]:
  """Infinite train batches of this process: {'image': [b, crop, crop, 3], 'label': one-hot}.

  Args:
    data: Reads every field but test, val, train_eval and batch_eval (Mixup is applied to
      the global batch in the train step).
    start_batch: Batches to skip; the stream then equals the one from 0 minus its first
      `start_batch` batches (used on resume, with the number of steps done).

  Returns:
    A numpy iterator; b = data.batch // jax.process_count(), images normalised (float32,
    in [-1, 1] with the official mean/std), or uint8 with `data.uint8_batches` (the train
    step normalises them: `device_normalize`).
  """
  if start_batch < 0:
    raise ValueError(f'start_batch must be >= 0, got {start_batch}.')
  source = _open(data)
  shared_stream = stream.sharding(data.sharding) == 'stream'
  split = source.split(data.train, per_process=not shared_stream)
  local_batch = _local_batch(data.batch, 'batch')
  if split.num_examples == 0:
    raise ValueError(f'Train split {data.train!r} has no examples here; '
                     'check config.pp.train.')
  preprocess = augment.make_train_preprocess(
      data.augment, crop=data.crop, mean=data.mean, std=data.std,
      uint8_batches=data.uint8_batches, num_classes=len(source.class_names))
  base_seed = stream.process_seed(data.seed, shared=shared_stream)
  example_seed = tf.random.experimental.stateless_fold_in(base_seed, 0)
  order = dict(seed=data.seed, shuffle_buffer=data.shuffle_buffer)
  ds = stream.train_stream(split, start_batch * local_batch, local_batch, shared_stream, **order)
  ds = ds.map(sources.as_written(lambda position, example: preprocess(
      example, tf.random.experimental.stateless_fold_in(example_seed, position))),
              num_parallel_calls=tf.data.AUTOTUNE)
  ds = ds.batch(local_batch, drop_remainder=True)
  ds = ds.prefetch(max(1, int(data.prefetch)))
  if not data.autotune:
    options = tf.data.Options()
    options.autotune.enabled = False
    ds = ds.with_options(options)
  return stream.numpy_batches(ds, stream.train_locator(
      split, start_batch * local_batch, local_batch, shared_stream, **order))


def device_normalize(data: Data) -> Optional[Callable[[Any], Any]]:
  """What the train step applies to `get_train_data`'s images: the normalisation of uint8
  batches (`data.uint8_batches`, jax.numpy), or None (the batches are model inputs)."""
  if not data.uint8_batches:
    return None
  return image_ops.device_normalize(data.mean, data.std)


def get_eval_data(data: Data, spec: Optional[str] = None) -> EvalData:
  """All of split `spec` (default `data.test`), resized to `data.crop`, split over processes,
  padded and masked."""
  spec = data.test if spec is None else spec
  source = _open(data)
  split = source.split(spec)
  local_batch = _local_batch(data.batch_eval, 'batch_eval')
  num_batches = -(-max(split.shares) // local_batch)
  if num_batches == 0:
    raise ValueError(f'Eval split {spec!r} is empty; check config.pp.test, pp.val and '
                     'pp.train_eval.')
  crop, num_classes = augment.crop_size(data.crop), len(source.class_names)
  normalize = image_ops.make_normalize(data.mean, data.std)

  def preprocess(example):
    data = split.read(example['image'])
    if split.checked:  # A broken file becomes a masked-out blank, so batch counts stay equal.
      ok = image_check.readable(data, example['image'])
      image = tf.cond(ok, lambda: image_ops.resize(image_ops.decode(data), crop),
                      lambda: tf.zeros([crop, crop, 3]))
    else:
      ok, image = tf.constant(True), image_ops.resize(image_ops.decode(data), crop)
    return {'image': normalize(image), 'label': tf.one_hot(example['label'], num_classes),
            'mask': tf.cast(ok, tf.float32)}

  padding = {'image': tf.zeros([crop, crop, 3]), 'label': tf.zeros([num_classes]),
             'mask': tf.constant(0., tf.float32)}
  num_padding = num_batches * local_batch - split.num_examples
  ds = split.make().map(sources.as_written(preprocess), num_parallel_calls=tf.data.AUTOTUNE)
  ds = ds.concatenate(tf.data.Dataset.from_tensors(padding).repeat(num_padding))
  ds = ds.batch(local_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
  return EvalData(num_examples=split.num_examples, num_batches=num_batches, dataset=ds,
                  shares=split.shares, strided=split.strided,
                  locate=stream.eval_locator(split, local_batch))


def _open(data: Data) -> sources.Source:
  _hide_accelerators_from_tf()
  dataset = data.dataset
  if not dataset:
    raise ValueError('config.dataset is empty: set a TFDS name (e.g. cifar10) or a directory '
                     'with train/<class>/*.jpg and test/<class>/*.jpg.')
  if os.path.isdir(dataset):
    return folder_source.open_folder(dataset)
  # TFDS only when a TFDS name is opened: importing the pipeline does not import it.
  from vit_jax.data import fashion_mnist  # noqa: F401  # pylint: disable=g-import-not-at-top
  from vit_jax.data import tfds_source  # pylint: disable=g-import-not-at-top
  return tfds_source.open_tfds(dataset, data.tfds_data_dir, data.tfds_manual_dir)


@functools.cache
def _hide_accelerators_from_tf() -> None:
  """Keeps TF (only used for input) off GPUs so JAX gets all their memory; once per process."""
  try:
    tf.config.set_visible_devices([], 'GPU')
  except RuntimeError as e:  # TF already initialized its devices; nothing left to change.
    logging.warning('Could not hide GPUs from TensorFlow: %s', e)


def _local_batch(global_batch: int, name: str) -> int:
  processes = jax.process_count()
  if global_batch <= 0 or global_batch % processes:
    raise ValueError(f'config.{name}={global_batch} must be a positive multiple of the '
                     f'{processes} processes; change config.{name}.')
  return global_batch // processes
