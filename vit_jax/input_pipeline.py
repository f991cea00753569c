"""Input pipelines: a TFDS dataset or a folder of images → numpy batches for this process.

The entry points the official code has: `get_dataset_info`, `get_train_data`, `get_eval_data`.
Train data is an infinite stream that is a function of `config.seed` and the position in it,
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
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

import jax
import numpy as np
import tensorflow as tf
from absl import logging

from vit_jax.data import augment
from vit_jax.data import folder_source
from vit_jax.data import image_ops
from vit_jax.data import sources
from vit_jax.data import stream

Batch = Dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
  """What the model and the schedule need to know about the configured splits.

  Attributes:
    num_classes: Size of the one-hot labels.
    num_train_examples: Examples in `config.pp.train`, over all processes.
    num_test_examples: Examples in `config.pp.test`, over all processes.
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


def get_dataset_info(config: Any) -> DatasetInfo:
  """Class names and the sizes of `config.pp.train` and `config.pp.test` (all processes).

  Raises:
    ValueError: if a split is empty, or an eval example is also a train example (accuracy on
      training images).
  """
  source = _open(config)
  train, test = config.pp.train, config.pp.test
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
  _check_val_disjoint(source, config)
  shared = source.overlap(train, test)
  if shared:
    raise SplitOverlapError(
        f'config.pp.train={train!r} and config.pp.test={test!r} share {shared} of the '
        f'{info.num_test_examples} eval examples of {config.dataset}: the accuracy would be '
        'measured on training images. Make them disjoint, e.g. --config.pp.train=train[:98%] '
        '--config.pp.test=train[98%:] (or give the folder a test/ folder).')
  logging.info('Training on %s: %d examples; evaluating on %s: %d examples (disjoint).',
               source.describe(train), info.num_train_examples, source.describe(test),
               info.num_test_examples)
  return info


def num_classes(config: Any) -> int:
  """Classes of `config.dataset` (its label names), without reading any split."""
  return len(_open(config).class_names)


def class_counts(config: Any, spec: str) -> Tuple[Tuple[str, ...], np.ndarray]:
  """(class names, images of each class) of split `spec` of `config.dataset`, all processes.

  Reads the labels only: a folder's listing, a TFDS split's records (images not decoded).
  """
  source = _open(config)
  split = source.split(spec, per_process=False)
  labels = split.make().map(lambda example: example['label'],
                            num_parallel_calls=tf.data.AUTOTUNE).batch(4096)
  counts = np.zeros(len(source.class_names), np.int64)
  for batch in labels.as_numpy_iterator():
    counts += np.bincount(batch, minlength=len(counts))[:len(counts)]
  return source.class_names, counts


def split_size(config: Any, spec: str) -> int:
  """Examples of split `spec` of `config.dataset`, all processes (only its size is read)."""
  return sum(_open(config).split(spec, per_process=False).shares)


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


def split_overlap(config: Any, train: str, test: str) -> int:
  """Examples of `config.dataset` that split strings `train` and `test` share."""
  return _open(config).overlap(train, test)


def dataset_identity(config: Any) -> Dict[str, Any]:
  """What `config` trains and evaluates on, wherever it is stored: the source's identity
  (`sources.Source.identity`) and the split strings read (`config.pp.*`)."""
  identity = dict(_open(config).identity())
  identity['splits'] = {name: config.pp[name] for name in ('train', 'test', 'val', 'train_eval')
                        if config.pp[name]}
  return identity


def _check_val_disjoint(source: sources.Source, config: Any) -> None:
  """pp.val guides choices made after seeing results: it may share no image with pp.train."""
  if not config.pp.val:
    return
  shared = source.overlap(config.pp.train, config.pp.val)
  if shared:
    raise SplitOverlapError(
        f'config.pp.train={config.pp.train!r} and config.pp.val={config.pp.val!r} share {shared} '
        'examples: validation accuracy would be measured on training images. Carve them apart, '
        'e.g. --config.pp.train=train[:90%] --config.pp.val=train[90%:].')


def get_train_data(config: Any, *, start_batch: int = 0) -> Iterator[Batch]:
  """Infinite train batches of this process: {'image': [b, crop, crop, 3], 'label': one-hot}.

  Args:
    config: Reads dataset, tfds_data_dir, tfds_manual_dir, data_sharding, pp.train, pp.crop,
      pp.train_aug, pp.randaug, pp.uint8_batches, batch, shuffle_buffer, seed, prefetch and
      data_autotune (Mixup is applied to the global batch in the train step).
    start_batch: Batches to skip; the stream then equals the one from 0 minus its first
      `start_batch` batches (used on resume, with the number of steps done).

  Returns:
    A numpy iterator; b = config.batch // jax.process_count(), images normalised (float32,
    in [-1, 1] with the official mean/std), or uint8 with `config.pp.uint8_batches` (the train
    step normalises them: `device_normalize`).
  """
  if start_batch < 0:
    raise ValueError(f'start_batch must be >= 0, got {start_batch}.')
  source = _open(config)
  shared_stream = stream.sharding(config) == 'stream'
  split = source.split(config.pp.train, per_process=not shared_stream)
  local_batch = _local_batch(config.batch, 'batch')
  if split.num_examples == 0:
    raise ValueError(f'Train split {config.pp.train!r} has no examples here; '
                     'check config.pp.train.')
  preprocess = augment.make_train_preprocess(config, len(source.class_names))
  base_seed = stream.process_seed(config, shared=shared_stream)
  example_seed = tf.random.experimental.stateless_fold_in(base_seed, 0)
  ds = stream.train_stream(config, split, start_batch * local_batch, local_batch, shared_stream)
  ds = ds.map(lambda position, example: preprocess(
      example, tf.random.experimental.stateless_fold_in(example_seed, position)),
              num_parallel_calls=tf.data.AUTOTUNE)
  ds = ds.batch(local_batch, drop_remainder=True)
  ds = ds.prefetch(max(1, int(config.prefetch)))
  if not config.data_autotune:
    options = tf.data.Options()
    options.autotune.enabled = False
    ds = ds.with_options(options)
  return stream.numpy_batches(ds, stream.train_locator(
      config, split, start_batch * local_batch, local_batch, shared_stream))


def device_normalize(config: Any) -> Optional[Callable[[Any], Any]]:
  """What the train step applies to `get_train_data`'s images: the normalisation of uint8
  batches (`config.pp.uint8_batches`, jax.numpy), or None (the batches are model inputs)."""
  if not config.pp.uint8_batches:
    return None
  return image_ops.device_normalize(config.pp.mean, config.pp.std)


def get_eval_data(config: Any, spec: Optional[str] = None) -> EvalData:
  """All of split `spec` (default `config.pp.test`), resized to `pp.crop`, split over processes,
  padded and masked."""
  spec = config.pp.test if spec is None else spec
  source = _open(config)
  split = source.split(spec)
  local_batch = _local_batch(config.batch_eval, 'batch_eval')
  num_batches = -(-max(split.shares) // local_batch)
  if num_batches == 0:
    raise ValueError(f'Eval split {spec!r} is empty; check config.pp.test, pp.val and '
                     'pp.train_eval.')
  crop, num_classes = augment.crop_size(config), len(source.class_names)
  normalize = image_ops.make_normalize(config.pp.mean, config.pp.std)

  def preprocess(example):
    data = split.read(example['image'])
    if split.checked:  # A broken file becomes a masked-out blank, so batch counts stay equal.
      ok = image_ops.readable(data, example['image'])
      image = tf.cond(ok, lambda: image_ops.resize(image_ops.decode(data), crop),
                      lambda: tf.zeros([crop, crop, 3]))
    else:
      ok, image = tf.constant(True), image_ops.resize(image_ops.decode(data), crop)
    return {'image': normalize(image), 'label': tf.one_hot(example['label'], num_classes),
            'mask': tf.cast(ok, tf.float32)}

  padding = {'image': tf.zeros([crop, crop, 3]), 'label': tf.zeros([num_classes]),
             'mask': tf.constant(0., tf.float32)}
  num_padding = num_batches * local_batch - split.num_examples
  ds = split.make().map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
  ds = ds.concatenate(tf.data.Dataset.from_tensors(padding).repeat(num_padding))
  ds = ds.batch(local_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
  return EvalData(num_examples=split.num_examples, num_batches=num_batches, dataset=ds,
                  shares=split.shares, strided=split.strided,
                  locate=stream.eval_locator(split, local_batch))


def _open(config: Any) -> sources.Source:
  _hide_accelerators_from_tf()
  dataset = config.dataset
  if not dataset:
    raise ValueError('config.dataset is empty: set a TFDS name (e.g. cifar10) or a directory '
                     'with train/<class>/*.jpg and test/<class>/*.jpg.')
  if os.path.isdir(dataset):
    return folder_source.open_folder(dataset)
  # TFDS only when a TFDS name is opened: importing the pipeline does not import it.
  from vit_jax.data import fashion_mnist  # noqa: F401  # pylint: disable=g-import-not-at-top
  from vit_jax.data import tfds_source  # pylint: disable=g-import-not-at-top
  return tfds_source.open_tfds(config)


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
