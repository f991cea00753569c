"""Input pipelines: a TFDS dataset or a folder of images → numpy batches for this process.

Train data is an infinite stream that is a function of `config.seed` and the position in it,
so a run resumes exactly: every random choice (crop, flip, RandAugment, random erasing) comes
from stateless ops seeded by the example's position (Mixup needs the global batch: it runs in the
train step, `train.mixup`). Sources with
random access (image folders, TFDS datasets prepared as ArrayRecord) address records by index:
position p reads record `index_shuffle(p % N)` of epoch p // N's permutation, so resuming at any
step costs the same and, with data_sharding='stream', each process reads only its slice of each
global batch. TFDS datasets prepared as TFRecord have no random access: their stream is the
official shuffle-buffer stream, and resuming skips (reads) every earlier example; re-prepare them
with file_format='array_record' (see docs/input_pipeline.md). Eval data covers its split exactly
once: the last batch is padded and carries a `mask`, and every process yields the same number of
batches so collective eval steps never wait on a process that has run out.

Image folders: `<root>/train/<class>/*.jpg|png` plus `test/`, `val/` or `validation/`. Split
strings use TFDS syntax (`train[:98%]`, `train[98%:]`, `train[:1000]`, `test`) on a fixed file
order that interleaves the classes evenly (file j of n in a class sorts at (j + 0.5) / n, files
within a class by name), so every % slice holds each class in proportion and `train[:98%]` and
`train[98%:]` partition train/. `test`, `val` and `validation` name the same folder when only one
of them exists; with train/ alone they are `train[98%:]` and a bare `train` is `train[:98%]`, as
the TFDS presets hold out a slice. Train and eval splits that share an example (on folders or
TFDS) are an error. Listing only reads directories; a file whose JPEG scan or PNG chunks end
early is found when read, logged (how many, and its name) and replaced by the next record of
the stream (train) or masked out (eval); bytes after the end (camera trailers) are fine.

Images are decoded to 3 channels (grayscale repeated, alpha dropped) and scaled to [-1, 1].
"""

import dataclasses
import functools
import math
import os
import re
import socket
import threading
import types
import urllib.parse
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import jax
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from absl import logging
from vit_jax.data import fashion_mnist
from vit_jax.data import randaugment
from vit_jax import presets

Batch = Dict[str, np.ndarray]

TRAIN_AUGS = ('inception', 'pad_flip', 'flip', 'none')
# Files a directory dataset is made of (by name; their content is checked when read).
IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png')
# Folder names a split name may be read from, in order of preference.
SPLIT_FOLDERS = {'test': ('test', 'val', 'validation'),
                 'validation': ('validation', 'val', 'test'),
                 'val': ('val', 'validation', 'test')}
# What `test` / `validation` mean for a folder with train/ only.
HELD_OUT_SPLIT = 'train[98%:]'
TRAIN_WITHOUT_HELD_OUT = 'train[:98%]'  # ... and what `train` then means: never trained on both.
# A train record that cannot be read is replaced by the next position's; this many in a row fail.
_MAX_UNREADABLE_IN_A_ROW = 16
_PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'
_PNG_END = b'\x00\x00\x00\x00IEND\xaeB`\x82'  # The IEND chunk: length 0, type, its fixed CRC.
_RECORDS_PER_READ = 256  # Records fetched together for a sequential (eval) pass.
# Offline, TFDS retries a failed download for ~3.5 minutes; a 3 s connect probe fails first.
_PROBE_TIMEOUT_S = 3.0
_SKIP_DECODING = {'image': tfds.decode.SkipDecoding()}


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
  """
  num_examples: int
  num_batches: int
  dataset: tf.data.Dataset

  def batches(self) -> Iterator[Batch]:
    """A fresh pass: {'image', 'label' (one-hot), 'mask' (1 real, 0 padding)} numpy dicts."""
    return numpy_batches(self.dataset)


@dataclasses.dataclass(frozen=True)
class _Split:
  """This process's share of one split, with images still encoded (or still file paths).

  With `fetch` the share has random access: record ids 0..num_examples-1 → examples.
  """
  make: Callable[[], tf.data.Dataset]  # Elements {'image': tf.string, 'label': tf.int64}.
  read: Callable[[tf.Tensor], tf.Tensor]  # The 'image' string → encoded image bytes.
  shares: Tuple[int, ...]  # Examples of each share; this process reads shares[index].
  index: int = 0
  # Record ids [k] → {'image': [k] strings, 'label': [k]}; None: sequential reading only.
  fetch: Optional[Callable[[tf.Tensor], Dict[str, tf.Tensor]]] = None
  checked: bool = False  # Whether read bytes may be broken files (checked, skipped, counted).

  @property
  def num_examples(self) -> int:
    return self.shares[self.index]


@dataclasses.dataclass(frozen=True)
class _Source:
  class_names: Tuple[str, ...]
  # (split name as in `config.pp.*`, per_process) → this process's share, or the whole split.
  split: Callable[..., _Split]
  # (train spec, eval spec) → how many eval examples are also train examples.
  overlap: Callable[[str, str], int]
  # A split spec → what it reads, for the log (e.g. "train[98%:] of /data: no test/ folder").
  describe: Callable[[str], str] = lambda spec: repr(spec)


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


def _check_val_disjoint(source: '_Source', config: Any) -> None:
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
      pp.train_aug, pp.randaug, batch, shuffle_buffer, seed and prefetch (Mixup is applied
      to the global batch in the train step).
    start_batch: Batches to skip; the stream then equals the one from 0 minus its first
      `start_batch` batches (used on resume, with the number of steps done).

  Returns:
    A numpy iterator; b = config.batch // jax.process_count(), images in [-1, 1].
  """
  if start_batch < 0:
    raise ValueError(f'start_batch must be >= 0, got {start_batch}.')
  source = _open(config)
  stream = _sharding(config) == 'stream'
  split = source.split(config.pp.train, per_process=not stream)
  local_batch = _local_batch(config.batch, 'batch')
  if split.num_examples == 0:
    raise ValueError(f'Train split {config.pp.train!r} has no examples here; '
                     'check config.pp.train.')
  augment = _make_train_preprocess(config, len(source.class_names))
  base_seed = _process_seed(config, shared=stream)
  example_seed = tf.random.experimental.stateless_fold_in(base_seed, 0)
  make_stream = _indexed_stream if split.fetch else _skipping_stream
  ds = make_stream(config, split, start_batch * local_batch, local_batch, stream)
  ds = ds.map(lambda position, example: augment(
      example, tf.random.experimental.stateless_fold_in(example_seed, position)),
              num_parallel_calls=tf.data.AUTOTUNE)
  ds = ds.batch(local_batch, drop_remainder=True)
  ds = ds.prefetch(max(1, int(config.prefetch)))
  return numpy_batches(ds)


def numpy_batches(ds: tf.data.Dataset) -> Iterator[Batch]:
  """The elements of `ds` as numpy; an error in the pipeline is a one-line ValueError.

  The failed tf.data iterator is dropped before the error is raised, so it is destroyed now, not
  at interpreter exit: destroyed then, its worker threads wait for Python calls that can no
  longer run (a `numpy_function` needs the interpreter) and the process never exits.
  """
  iterator, message = iter(tfds.as_numpy(ds)), ''
  while not message:
    try:
      batch = next(iterator)
    except StopIteration:
      return
    except tf.errors.OpError as e:
      message = _pipeline_error_line(e)
    else:
      yield batch
  del iterator
  raise ValueError(f'The input pipeline failed: {message}')


def _pipeline_error_line(error: tf.errors.OpError) -> str:
  """The reason in TF's error: an assertion's own message, else the text after the op chain."""
  text = error.message.strip()
  asserted = re.search(r'assertion failed: \[([^\]]*)\]', text)
  if asserted:
    return asserted.group(1)
  text = re.sub(r'\{\{[^}]*\}\}\s*', '', text.splitlines()[0] if text else type(error).__name__)
  return re.sub(r'^Error in user-defined function .*? with iterator: \S+: ', '', text)


def _indexed_stream(config: Any, split: _Split, start: int, local_batch: int,
                    stream: bool) -> tf.data.Dataset:
  """(position, example with encoded image) from this process's example number `start` on.

  Position p is record `index_shuffle(p % N)` of epoch p // N's permutation (every record once
  per epoch), so starting anywhere costs the same. In the 'stream' sharding positions are
  global and each process computes those of its own slice of every global batch.
  """
  count, index = (jax.process_count(), jax.process_index()) if stream else (1, 0)
  size = split.num_examples
  order_seed = tf.constant([int(config.seed), 2], tf.int64)

  def position(k):  # This process's k-th example → its position in the stream.
    return (k // local_batch) * (local_batch * count) + index * local_batch + k % local_batch

  def record(p):
    epoch_seed = tf.random.experimental.stateless_fold_in(order_seed, p // size)
    return tf.random.experimental.index_shuffle(p % size, epoch_seed, tf.constant(size - 1,
                                                                                  tf.int64))

  ds = tf.data.Dataset.range(start, np.iinfo(np.int64).max).map(position)
  ds = ds.map(lambda p: (p, record(p))).batch(local_batch)
  ds = ds.map(lambda p, ids: (p, split.fetch(ids)), num_parallel_calls=tf.data.AUTOTUNE)
  ds = ds.unbatch()
  return ds.map(lambda p, example: (p, _read_train_example(split, example, p, record)),
                num_parallel_calls=tf.data.AUTOTUNE)


def _read_train_example(split: _Split, example: Dict[str, tf.Tensor], position: tf.Tensor,
                        record: Callable[[tf.Tensor], tf.Tensor]) -> Dict[str, tf.Tensor]:
  """The example with its image bytes; a broken file is replaced by the next position's record.

  The replacement depends only on the position, so the stream stays exactly resumable.
  """
  data = split.read(example['image'])
  if not split.checked:
    return {'image': data, 'label': example['label']}

  def next_record(tries, data, label, ok):
    del data, label, ok
    replacement = split.fetch(record(position + tries)[None])
    data = split.read(replacement['image'][0])
    return tries + 1, data, replacement['label'][0], _readable(data, replacement['image'][0])

  tries, data, label, ok = tf.while_loop(
      lambda tries, data, label, ok: tf.logical_and(tf.logical_not(ok),
                                                    tries < _MAX_UNREADABLE_IN_A_ROW),
      next_record, (tf.constant(1, tf.int64), data, example['label'],
                    _readable(data, example['image'])))
  del tries
  tf.debugging.assert_equal(ok, True, message=f'{_MAX_UNREADABLE_IN_A_ROW} unreadable image '
                            'files in a row (see the warnings above); fix the dataset.')
  return {'image': data, 'label': label}


def _skipping_stream(config: Any, split: _Split, start: int, local_batch: int,
                     stream: bool) -> tf.data.Dataset:
  """The official shuffle-buffer stream for sources without random access; skips to `start`.

  Repeat before shuffle (as the official pipeline): one shuffle spans epoch boundaries, so the
  stream is a function of the seed and the position. Resuming reads every skipped example.
  """
  buffer = max(1, min(int(config.shuffle_buffer), split.num_examples))
  ds = split.make().repeat().shuffle(buffer, seed=int(config.seed)).enumerate()
  if stream:
    # Every process walks the same shuffled stream and keeps its slice of each global batch:
    # the global batches, and so training, do not depend on the number of processes.
    count, index = jax.process_count(), jax.process_index()
    ds = ds.skip(start * count)
    ds = ds.filter(lambda position, _: (position // local_batch) % count == index)
  else:
    ds = ds.skip(start)
  return ds.map(lambda position, example: (position, {'image': split.read(example['image']),
                                                      'label': example['label']}))


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
  crop, num_classes = _crop(config), len(source.class_names)
  normalize = make_normalize(config.pp.mean, config.pp.std)

  def preprocess(example):
    data = split.read(example['image'])
    if split.checked:  # A broken file becomes a masked-out blank, so batch counts stay equal.
      ok = _readable(data, example['image'])
      image = tf.cond(ok, lambda: _resize(_decode(data), crop), lambda: tf.zeros([crop, crop, 3]))
    else:
      ok, image = tf.constant(True), _resize(_decode(data), crop)
    return {'image': normalize(image), 'label': tf.one_hot(example['label'], num_classes),
            'mask': tf.cast(ok, tf.float32)}

  padding = {'image': tf.zeros([crop, crop, 3]), 'label': tf.zeros([num_classes]),
             'mask': tf.constant(0., tf.float32)}
  num_padding = num_batches * local_batch - split.num_examples
  ds = split.make().map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
  ds = ds.concatenate(tf.data.Dataset.from_tensors(padding).repeat(num_padding))
  ds = ds.batch(local_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
  return EvalData(num_examples=split.num_examples, num_batches=num_batches, dataset=ds)


def _open(config: Any) -> _Source:
  _hide_accelerators_from_tf()
  dataset = config.dataset
  if not dataset:
    raise ValueError('config.dataset is empty: set a TFDS name (e.g. cifar10) or a directory '
                     'with train/<class>/*.jpg and test/<class>/*.jpg.')
  if os.path.isdir(dataset):
    return _directory_source(dataset)
  return _tfds_source(config)


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


def _crop(config: Any) -> int:
  crop = config.pp.crop
  if not isinstance(crop, int) or crop <= 0:
    raise ValueError(f'config.pp.crop must be a positive int (image side), got {crop!r}.')
  return crop


def _process_seed(config: Any, shared: bool = False) -> tf.Tensor:
  """A stateless seed per (config.seed, process), so processes augment independently.

  With `shared` (the 'stream' sharding) positions are global, so one seed serves all processes.
  """
  process = 0 if shared else jax.process_index()
  return tf.constant([int(config.seed), process], tf.int64)


DATA_SHARDINGS = ('split', 'stream')


def _sharding(config: Any) -> str:
  """'split': each process reads only its share of the files (scales to pods; the default).

  'stream': each process reads the whole shuffled stream and keeps its slice of each global
  batch: results identical for any number of processes (costs reading everything everywhere).
  """
  mode = config.data_sharding
  if mode not in DATA_SHARDINGS:
    raise ValueError(f'config.data_sharding={mode!r} is unknown; use one of {DATA_SHARDINGS}.')
  return mode


def _tfds_source(config: Any) -> _Source:
  builder = _prepared_builder(config)
  features = builder.info.features
  keys = features.keys()
  if ('image' not in keys or 'label' not in keys
      or not isinstance(features['image'], tfds.features.Image)
      or not isinstance(features['label'], tfds.features.ClassLabel)):
    raise ValueError(f'TFDS dataset {config.dataset!r} has no image + class label features; '
                     'use an image classification dataset.')
  indexed = builder.info.file_format == tfds.core.FileFormat.ARRAY_RECORD
  if not indexed:
    _warn_once(f'TFDS dataset {builder.name} in {builder.data_dir} is prepared as '
               f'{builder.info.file_format.value}, which has no random access: resuming at step '
               's re-reads s batches. Re-prepare it with file_format="array_record" for resume '
               'in constant time (see docs/input_pipeline.md).')

  def split(name: str, per_process: bool = True) -> _Split:
    specs = _tfds_process_splits(name) if per_process else [name]
    index = jax.process_index() if per_process else 0
    if indexed:
      sources = [_tfds_data_source(builder, s, name) for s in specs]
      return _indexed_split(_tfds_fetch(sources[index]), lambda image: image,
                            tuple(len(s) for s in sources), index)
    return _Split(
        make=lambda: _tfds_dataset(builder, specs[index], name),
        read=lambda image: image,
        shares=tuple(_count(_tfds_dataset(builder, s, name)) for s in specs), index=index)

  return _Source(class_names=tuple(features['label'].names), split=split,
                 overlap=functools.partial(_tfds_overlap, split),
                 describe=lambda spec: f'{spec!r} of {builder.name}')


def _tfds_overlap(split: Callable[..., _Split], train: str, test: str) -> int:
  """Examples in both split specs: their index ranges over the same named split intersected."""
  names = {part.split('[')[0].strip() for spec in (train, test) for part in spec.split('+')}
  sizes = {name: types.SimpleNamespace(num_examples=sum(split(name, per_process=False).shares))
           for name in names}
  ranges = [tfds.core.ReadInstruction.from_spec(spec).to_absolute(sizes)
            for spec in (train, test)]
  bounds = [[(r.splitname, r.from_ or 0, sizes[r.splitname].num_examples if r.to is None else r.to)
             for r in spec_ranges] for spec_ranges in ranges]  # None: the split's start or end.
  return sum(max(0, min(a[2], b[2]) - max(a[1], b[1]))
             for a in bounds[0] for b in bounds[1] if a[0] == b[0])


def _indexed_split(fetch: Callable[[tf.Tensor], Dict[str, tf.Tensor]],
                   read: Callable[[tf.Tensor], tf.Tensor], shares: Tuple[int, ...], index: int,
                   checked: bool = False) -> _Split:
  """A random-access share; its sequential pass fetches records in order, a block at a time."""
  def make():
    ids = tf.data.Dataset.range(shares[index]).batch(_RECORDS_PER_READ)
    return ids.map(fetch, num_parallel_calls=tf.data.AUTOTUNE).unbatch()

  return _Split(make=make, read=read, shares=shares, index=index, fetch=fetch, checked=checked)


def _tfds_data_source(builder: tfds.core.DatasetBuilder, split: Any, name: str) -> Any:
  try:
    return builder.as_data_source(split=split, decoders=_SKIP_DECODING)
  except (KeyError, ValueError, AssertionError) as e:
    splits = ', '.join(builder.info.splits) or 'see the TFDS catalog'
    raise ValueError(f'Cannot read split {name!r} of {builder.name} ({splits}): '
                     f'{str(e).splitlines()[0]}; fix config.pp.train / config.pp.test.') from e


def _tfds_fetch(source: Any) -> Callable[[tf.Tensor], Dict[str, tf.Tensor]]:
  """Record ids → examples of a TFDS data source (ArrayRecord reads, outside the GIL's way)."""
  def read(ids: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    records = source.__getitems__([int(i) for i in ids])
    return (np.array([r['image'] for r in records], dtype=object),
            np.array([r['label'] for r in records], dtype=np.int64))

  def fetch(ids: tf.Tensor) -> Dict[str, tf.Tensor]:
    images, labels = tf.numpy_function(read, [ids], (tf.string, tf.int64), stateful=False)
    images.set_shape(ids.shape)
    labels.set_shape(ids.shape)
    return {'image': images, 'label': labels}

  return fetch


def _tfds_process_splits(name: str) -> List[Any]:
  """`name` cut into one contiguous share per process (sizes differ by at most one)."""
  if jax.process_count() == 1:
    return [name]
  return list(tfds.even_splits(name, n=jax.process_count(), drop_remainder=False))


def _tfds_dataset(builder: tfds.core.DatasetBuilder, split: Any, name: str) -> tf.data.Dataset:
  try:
    ds = builder.as_dataset(split=split, decoders=_SKIP_DECODING, shuffle_files=False)
  except (KeyError, ValueError, AssertionError) as e:
    splits = ', '.join(builder.info.splits) or 'see the TFDS catalog'
    raise ValueError(f'Cannot read split {name!r} of {builder.name} ({splits}): '
                     f'{str(e).splitlines()[0]}; fix config.pp.train / config.pp.test.') from e
  return ds.map(lambda example: {'image': example['image'], 'label': example['label']})


def _count(ds: tf.data.Dataset) -> int:
  """Examples in `ds`: its cardinality (known for TFDS splits), else one pass to count."""
  cardinality = int(ds.cardinality())
  if cardinality >= 0:
    return cardinality
  return int(ds.reduce(np.int64(0), lambda count, _: count + 1))


def _prepared_builder(config: Any) -> tfds.core.DatasetBuilder:
  """The TFDS builder of `config.dataset`, prepared (or a clear ValueError).

  fashion_mnist is prepared from local idx files when they exist (`config.fashion_mnist_dir`,
  $FASHION_MNIST_DIR or Debian's dataset-fashion-mnist): the same records, no download. Other
  datasets are downloaded by TFDS; an unreachable download host fails in seconds, not after
  TFDS's ~3.5 minutes of retries.
  """
  name, data_dir = config.dataset, config.tfds_data_dir
  try:
    builder = tfds.builder(name, data_dir=data_dir)
  except (tfds.core.registered.DatasetNotFoundError, ValueError, AssertionError) as e:
    raise ValueError(f'Unknown dataset {name!r}: not a TFDS name ({str(e).splitlines()[0]}) and '
                     'not a directory with train/<class>/*.jpg and test/<class>/*.jpg.') from None
  if builder.is_prepared():
    return builder
  if builder.name == 'fashion_mnist' and fashion_mnist.local_source_dir(config.fashion_mnist_dir):
    fashion_mnist.prepare(data_dir, config.fashion_mnist_dir)
    return tfds.builder(name, data_dir=data_dir)
  manual_dir = config.tfds_manual_dir
  if builder.MANUAL_DOWNLOAD_INSTRUCTIONS and not manual_dir and not _download_is_mocked():
    raise ValueError(f'TFDS dataset {name!r} needs a manual download: set '
                     'config.tfds_manual_dir to the folder with its files (see the TFDS catalog), '
                     'or config.tfds_data_dir to where it is already prepared.')
  if not manual_dir and not _download_is_mocked() and not _download_hosts_reachable(builder):
    raise _not_prepared(config, builder, 'its download servers are unreachable')
  if not _download_is_mocked():  # Prepared as ArrayRecord, it has random access.
    builder = tfds.builder(name, data_dir=data_dir, file_format='array_record')
  try:
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))
  except Exception as e:  # noqa: BLE001  # Network, checksum, disk errors: all mean offline.
    raise _not_prepared(config, builder, f'the download failed ({type(e).__name__}: '
                        f'{str(e).splitlines()[0] if str(e) else ""})') from e
  return builder


def _not_prepared(config: Any, builder: tfds.core.DatasetBuilder, reason: str) -> ValueError:
  hint = (' For fashion_mnist offline: `apt-get install dataset-fashion-mnist` or set '
          'config.fashion_mnist_dir to a folder with its idx files.'
          if builder.name == 'fashion_mnist' else '')
  return ValueError(
      f'TFDS dataset {config.dataset!r} is not prepared in {builder.data_dir} and cannot be '
      f'downloaded: {reason}. Set config.tfds_data_dir to a folder where it is prepared, '
      'config.tfds_manual_dir to its downloaded files, or config.dataset to a directory of '
      f'images (train/<class>/*.jpg, test/<class>/*.jpg).{hint}')


def _download_is_mocked() -> bool:
  """True under `tfds.testing.mock_data`, whose download is a no-op that needs no network."""
  method = tfds.core.DatasetBuilder.download_and_prepare
  return not getattr(method, '__module__', '').startswith('tensorflow_datasets.core')


def _download_hosts_reachable(builder: tfds.core.DatasetBuilder) -> bool:
  """Whether a TCP connection to every host the builder downloads from opens within seconds.

  Unknown URLs or a configured proxy (connections would go through it) count as reachable, so
  the real download gets to try.
  """
  if any(os.environ.get(v) for v in ('HTTPS_PROXY', 'https_proxy', 'HTTP_PROXY', 'http_proxy')):
    return True
  try:
    urls = list(builder.url_infos or ())
  except Exception:  # noqa: BLE001  # No or unreadable checksums file.
    return True
  hosts = set()
  for url in urls:
    parsed = urllib.parse.urlparse(url)
    if parsed.hostname:
      hosts.add((parsed.hostname, parsed.port or (443 if parsed.scheme == 'https' else 80)))
  return all(_can_connect(host, port) for host, port in sorted(hosts))


def _can_connect(host: str, port: int) -> bool:
  try:
    with socket.create_connection((host, port), timeout=_PROBE_TIMEOUT_S):
      return True
  except OSError:
    return False


def _directory_source(root: str) -> _Source:
  train_dir = os.path.join(root, 'train')
  classes = tuple(sorted(_subdirs(train_dir))) if os.path.isdir(train_dir) else ()
  if not classes:
    raise ValueError(f'{root} is not an image dataset: expected {root}/train/<class>/*.jpg '
                     f'(or .jpeg/.png) and {root}/test/<class>/*.jpg, one folder per class.')

  def split(name: str, per_process: bool = True) -> _Split:
    paths, labels = _folder_split(root, classes, _without_held_out(root, name))
    index, count = (jax.process_index(), jax.process_count()) if per_process else (0, 1)
    # Strided shares keep every class on every process (the file order interleaves classes).
    share_paths = tf.constant(paths[index::count])
    share_labels = tf.constant(labels[index::count])

    def fetch(ids: tf.Tensor) -> Dict[str, tf.Tensor]:
      return {'image': tf.gather(share_paths, ids), 'label': tf.gather(share_labels, ids)}

    return _indexed_split(fetch, tf.io.read_file, tuple(len(paths[i::count]) for i in range(count)),
                          index, checked=True)

  def overlap(train: str, test: str) -> int:
    specs = [_without_held_out(root, spec) for spec in (train, test)]
    return len(set(_folder_split(root, classes, specs[0])[0])
               & set(_folder_split(root, classes, specs[1])[0]))

  return _Source(class_names=classes, split=split, overlap=overlap,
                 describe=functools.partial(_describe_folder_split, root))


def _held_out_folder(root: str, name: str) -> Optional[str]:
  """The folder that split `name` (test, val, validation) reads, or None (train/ only)."""
  return next((f for f in SPLIT_FOLDERS.get(name, (name,)) if os.path.isdir(os.path.join(root, f))),
              None)


def _without_held_out(root: str, spec: str) -> str:
  """`train` → `train[:98%]` in a folder with train/ only, where the rest is the eval split.

  As in the TFDS presets (`train[:98%]` / `test`), the held-out slice is never trained on; an
  explicit slice (`train[:100%]`) is taken as written.
  """
  if spec.strip() == 'train' and not _held_out_folder(root, 'test'):
    _log_once(f'{root} has only train/: split {spec!r} is {TRAIN_WITHOUT_HELD_OUT}, without the '
              f'held-out {HELD_OUT_SPLIT} that test/val/validation name.')
    return TRAIN_WITHOUT_HELD_OUT
  return spec


def _describe_folder_split(root: str, spec: str) -> str:
  """What `spec` reads in `root`, for the log: the folders or the slices of train/."""
  if spec.strip() in SPLIT_FOLDERS:
    folder = _held_out_folder(root, spec.strip())
    return (f'{spec!r} = {root}/{folder}/' if folder else
            f'{spec!r} = {HELD_OUT_SPLIT} of {root} (no test/, val/ or validation/ folder)')
  resolved = _without_held_out(root, spec)
  return f'{spec!r} of {root}' + (f' (= {resolved})' if resolved != spec else '')


def _folder_split(root: str, classes: Tuple[str, ...],
                  spec: str) -> Tuple[np.ndarray, np.ndarray]:
  """(paths, labels) of a TFDS-style split string over the folders of `root`."""
  names = [part.split('[')[0].strip() for part in spec.split('+')]
  bases = {name: _folder_base_split(root, classes, name) for name in names}
  sizes = {name: types.SimpleNamespace(num_examples=len(paths))
           for name, (paths, _) in bases.items()}
  try:
    instructions = tfds.core.ReadInstruction.from_spec(spec).to_absolute(sizes)
  except (ValueError, AssertionError) as e:
    raise ValueError(f'Cannot read split {spec!r} of {root}: {str(e).splitlines()[0]}; fix '
                     'config.pp.train / config.pp.test (TFDS syntax, e.g. train[:98%]).') from None
  parts = [tuple(a[i.from_:i.to] for a in bases[i.splitname]) for i in instructions]
  return np.concatenate([p for p, _ in parts]), np.concatenate([label for _, label in parts])


def _folder_base_split(root: str, classes: Tuple[str, ...],
                       name: str) -> Tuple[np.ndarray, np.ndarray]:
  """A whole split by name: its folder, an alias folder (test/val/validation) or held-out train."""
  folder = _held_out_folder(root, name)
  if folder:
    if folder != name:
      _log_once(f'{root} has no {name}/ folder: split {name!r} reads {folder}/.')
    return _list_images(os.path.join(root, folder), classes)
  if name in SPLIT_FOLDERS:
    _log_once(f'{root} has only train/: split {name!r} is {HELD_OUT_SPLIT} (the last 2% of '
              f'train/ in its fixed order); split \'train\' is then {TRAIN_WITHOUT_HELD_OUT}.')
    return _folder_split(root, classes, HELD_OUT_SPLIT)
  raise ValueError(f'Missing {os.path.join(root, name)}: a directory dataset needs '
                   '<root>/train/<class>/*.jpg (and test/, val/ or validation/ for evaluation); '
                   'fix config.pp.train / config.pp.test.')


@functools.cache
def _list_images(split_dir: str, classes: Tuple[str, ...]) -> Tuple[np.ndarray, np.ndarray]:
  """Image files under split_dir/<class>/ and their labels, classes interleaved evenly.

  File j of a class with n files sorts at (j + 0.5) / n (ties by class), files within a class
  by name: any prefix or suffix holds every class in proportion. Only directories are read
  (no file is opened), so a million files list in seconds; cached per process.
  """
  unknown = sorted(set(_subdirs(split_dir)) - set(classes))
  if unknown:
    raise ValueError(f'{split_dir} has class folders {unknown} that train/ lacks; every class '
                     'needs a folder in train/.')
  files = []
  for c in classes:
    folder = os.path.join(split_dir, c)
    files.append(sorted(e.name for e in os.scandir(folder)
                        if e.name.lower().endswith(IMAGE_EXTENSIONS) and e.is_file())
                 if os.path.isdir(folder) else [])
  if not any(files):
    raise ValueError(f'{split_dir} has no .jpg/.jpeg/.png files in its class folders; '
                     f'expected {split_dir}/<class>/*.jpg.')
  labels = np.concatenate([np.full(len(f), c, np.int64) for c, f in enumerate(files)])
  ranks = np.concatenate([(np.arange(len(f)) + 0.5) / len(f) for f in files if f])
  order = np.lexsort((labels, ranks))
  paths = np.array([os.path.join(split_dir, classes[c], name)
                    for c, names in enumerate(files) for name in names])[order]
  logging.info('%s: %d images in %d classes.', split_dir, len(paths), len(classes))
  return paths, labels[order]


def _subdirs(directory: str) -> List[str]:
  return [e.name for e in os.scandir(directory) if e.is_dir()]


_unreadable_lock = threading.Lock()
_unreadable: Dict[str, set] = {}  # Folder → names of its broken files met by this process.


def _readable(data: tf.Tensor, name: tf.Tensor) -> tf.Tensor:
  """Whether `data` is a whole JPEG, PNG, WebP or BMP (all that TF decodes); logs it if not.

  Bytes after the end are allowed: cameras and phones append trailers (maker notes, a second
  image, a video) after a JPEG's EOI, and some writers pad PNGs; TF decodes both.
  """
  ok = tf.reduce_any(tf.stack([_complete_jpeg(data), _complete_png(data),
                               _complete_webp_or_bmp(data)]))
  return tf.cond(ok, lambda: ok, lambda: tf.numpy_function(_count_unreadable, [name], tf.bool,
                                                           stateful=True))


def _complete_png(data: tf.Tensor) -> tf.Tensor:
  """The signature, then the IEND chunk somewhere (a truncated file lacks it)."""
  signature = tf.equal(tf.strings.substr(data, 0, 8), _PNG_SIGNATURE)
  return tf.logical_and(signature, tf.size(tf.strings.split(data, sep=_PNG_END)) > 1)


def _complete_webp_or_bmp(data: tf.Tensor) -> tf.Tensor:
  """A WebP or BMP (TF decodes them too: web images saved as .jpg often are WebP) holding at
  least the bytes its header declares: RIFF size + 8 (a trailer allowed), BMP size exactly
  (TF rejects a BMP of any other size, so one with extra bytes counts as unreadable too)."""
  size = tf.cast(tf.strings.length(data), tf.int64)
  padded = tf.strings.join([data, bytes(12)])  # Reads past the end see zeros.

  def le32(offset):
    raw = tf.cast(tf.io.decode_raw(tf.strings.substr(padded, offset, 4), tf.uint8), tf.int64)
    return tf.reduce_sum(raw * tf.constant([1, 1 << 8, 1 << 16, 1 << 24], tf.int64))

  webp = tf.logical_and(
      tf.logical_and(tf.equal(tf.strings.substr(padded, 0, 4), b'RIFF'),
                     tf.equal(tf.strings.substr(padded, 8, 4), b'WEBP')),
      size >= le32(4) + 8)
  bmp = tf.logical_and(tf.equal(tf.strings.substr(padded, 0, 2), b'BM'), tf.equal(size, le32(2)))
  return tf.logical_or(webp, bmp)


def _complete_jpeg(data: tf.Tensor) -> tf.Tensor:
  """SOI, the marker segments walked by their lengths up to the first scan (SOS), then an EOI.

  Walking by lengths (as libjpeg reads markers) skips an EXIF thumbnail's own SOS ... EOI, so a
  file cut inside its main scan is caught; anything after the EOI is a trailer and allowed.
  """
  raw = tf.cast(tf.io.decode_raw(data, tf.uint8), tf.int32)
  size = tf.size(raw)
  padded = tf.concat([raw, tf.zeros([4], tf.int32)], 0)  # Reads past the end see zeros.
  byte = lambda i: padded[tf.minimum(i, size + 3)]  # noqa: E731
  soi = tf.equal(tf.strings.substr(data, 0, 3), b'\xff\xd8\xff')

  def at_scan(pos):
    return tf.logical_and(tf.equal(byte(pos), 0xFF), tf.equal(byte(pos + 1), 0xDA))

  def next_marker(pos):
    marker, length = byte(pos + 1), byte(pos + 2) * 256 + byte(pos + 3)
    standalone = tf.logical_or(tf.equal(marker, 0x01),
                               tf.logical_and(marker >= 0xD0, marker <= 0xD7))
    skip = tf.where(tf.logical_or(tf.not_equal(byte(pos), 0xFF), tf.equal(marker, 0xFF)), 1,
                    tf.where(standalone, 2, 2 + length))  # Garbage and fill bytes: one at a time.
    return (pos + skip,)

  (pos,) = tf.while_loop(lambda pos: tf.logical_and(pos + 1 < size, tf.logical_not(at_scan(pos))),
                         next_marker, (tf.where(soi, 2, size),))
  scan = raw[tf.minimum(pos, size):]
  eoi = tf.reduce_any(tf.logical_and(tf.equal(scan[:-1], 0xFF), tf.equal(scan[1:], 0xD9)))
  return tf.logical_and(soi, tf.logical_and(at_scan(pos), eoi))


def _count_unreadable(name: bytes) -> np.bool_:
  """Logs the broken file's name and the count so far (the 1st, 2nd, 4th, 8th... of a folder)."""
  path = name.decode(errors='replace')
  folder = os.path.dirname(os.path.dirname(path))
  with _unreadable_lock:
    seen = _unreadable.setdefault(folder, set())
    new = path not in seen
    seen.add(path)
    count = len(seen)
  if new and count & (count - 1) == 0:
    logging.warning('Skipped %d unreadable image file(s) in %s so far (not a complete '
                    'JPEG/PNG/WebP/BMP), e.g. %s: delete or replace them.', count, folder, path)
  return np.bool_(False)


@functools.cache
def _log_once(message: str) -> None:
  logging.info(message)


@functools.cache
def _warn_once(message: str) -> None:
  logging.warning(message)


def _decode(data: tf.Tensor) -> tf.Tensor:
  """JPEG/PNG bytes → uint8 [h, w, 3]: grayscale is repeated, alpha dropped."""
  image = tf.io.decode_image(data, channels=3, expand_animations=False)
  image.set_shape([None, None, 3])
  return image


def _resize(image: tf.Tensor, size: int) -> tf.Tensor:
  """Bilinear to [size, size] as float32 in [0, 255] (identity at the same size)."""
  return tf.image.resize(image, [size, size], method='bilinear')


def is_official_normalization(mean: Sequence[float], std: Sequence[float]) -> bool:
  return tuple(mean) == presets.OFFICIAL_MEAN and tuple(std) == presets.OFFICIAL_STD


def make_normalize(mean: Sequence[float], std: Sequence[float]
                   ) -> Callable[[tf.Tensor], tf.Tensor]:
  """uint8-valued image → float32 model input, (x / 255 - mean) / std per channel.

  The official 0.5/0.5 keeps its exact float32 arithmetic `x / 127.5 - 1` (default runs are
  bit-identical to before); `features.preprocess` does the same on a file, so predictions on a
  file match eval on it.
  """
  if len(mean) != 3 or len(std) != 3 or not all(s > 0 for s in std):
    raise ValueError(f'config.pp.mean={tuple(mean)} / pp.std={tuple(std)} must be 3 values (RGB) '
                     'each, std > 0, e.g. --config.pp.mean="(0.485, 0.456, 0.406)".')
  if is_official_normalization(mean, std):
    return lambda image: tf.cast(image, tf.float32) / 127.5 - 1.
  mean32, std32 = tf.constant(mean, tf.float32), tf.constant(std, tf.float32)
  return lambda image: (tf.cast(image, tf.float32) / 255. - mean32) / std32


def _make_train_preprocess(config: Any, num_classes: int) -> Callable[
    [Dict[str, tf.Tensor], tf.Tensor], Dict[str, tf.Tensor]]:
  """Returns preprocess(example with encoded image, seed) for training; config checked once."""
  crop = _crop(config)
  aug = config.pp.train_aug
  area_min = float(config.pp.area_min)
  if not 0 < area_min <= 1:
    raise ValueError(f'config.pp.area_min={area_min} must be in (0, 1] (the smallest crop area).')
  if aug not in TRAIN_AUGS:
    raise ValueError(f'config.pp.train_aug={aug!r} is unknown; use one of {TRAIN_AUGS}.')
  num_layers = int(config.pp.randaug.num_layers)
  magnitude = float(config.pp.randaug.magnitude)
  if num_layers < 0 or not 0 <= magnitude <= randaugment.MAX_MAGNITUDE:
    raise ValueError(f'config.pp.randaug needs num_layers >= 0 and magnitude in '
                     f'[0, {randaugment.MAX_MAGNITUDE}], got {num_layers}, {magnitude}.')
  erase = float(config.pp.random_erase)
  if not 0 <= erase <= 1:
    raise ValueError(f'config.pp.random_erase={erase} must be a probability in [0, 1] (0 = off).')
  normalize = make_normalize(config.pp.mean, config.pp.std)

  def preprocess(example, seed):
    crop_seed, flip_seed, randaug_seed = tf.unstack(
        tf.random.experimental.stateless_split(seed, 3))
    image = _decode(example['image'])
    if aug == 'inception':
      image = _inception_crop(image, crop, crop_seed, area_min)
    elif aug == 'pad_flip':
      image = _pad_and_crop(_resize(image, crop), crop // 8, crop_seed)
    else:
      image = _resize(image, crop)
    if aug != 'none':
      image = tf.image.stateless_random_flip_left_right(image, flip_seed)
    if num_layers:
      image = randaugment.randaugment(image, num_layers, magnitude, randaug_seed)
    if erase:  # Its own fold of the seed: the other augmentations' streams stay as they were.
      image = random_erase(image, erase, tf.random.experimental.stateless_fold_in(seed, 3))
    return {'image': normalize(image), 'label': tf.one_hot(example['label'], num_classes)}

  return preprocess


def _inception_crop(image: tf.Tensor, size: int, seed: tf.Tensor,
                    area_min: float = 0.05) -> tf.Tensor:
  """The official random crop: `area_min` (5%)-100% of the area, aspect 3/4-4/3, resized."""
  begin, crop_size, _ = tf.image.stateless_sample_distorted_bounding_box(
      tf.shape(image), tf.zeros([0, 0, 4], tf.float32), seed=seed, area_range=(area_min, 1.0),
      min_object_covered=0, use_image_if_no_bounding_boxes=True)
  return _resize(tf.slice(image, begin, crop_size), size)


def _pad_and_crop(image: tf.Tensor, pad: int, seed: tf.Tensor) -> tf.Tensor:
  """Reflect-pads by `pad` and crops back at a random offset (the small-image translation)."""
  if pad == 0:
    return image
  padded = tf.pad(image, [[pad, pad], [pad, pad], [0, 0]], mode='REFLECT')
  return tf.image.stateless_random_crop(padded, tf.shape(image), seed=seed)


def random_erase(image: tf.Tensor, probability: float, seed: tf.Tensor,
                 area_range: Tuple[float, float] = (0.02, 0.4),
                 max_aspect: float = 1 / 0.3) -> tf.Tensor:
  """Random erasing (Zhong et al. 2017): with `probability`, one rectangle becomes noise.

  The rectangle covers `area_range` of the image (uniform) with an aspect ratio log-uniform in
  [1/max_aspect, max_aspect], clipped to the image; its pixels are uniform in [0, 255]. The
  paper's defaults; it lowered Fashion-MNIST error the most of its benchmarks.
  """
  apply_seed, area_seed, aspect_seed, top_seed, left_seed, noise_seed = tf.unstack(
      tf.random.experimental.stateless_split(seed, 6))
  shape = tf.shape(image)
  height, width = shape[0], shape[1]
  area = tf.cast(height * width, tf.float32) * tf.random.stateless_uniform(
      [], area_seed, area_range[0], area_range[1])
  aspect = tf.exp(tf.random.stateless_uniform([], aspect_seed, -math.log(max_aspect),
                                              math.log(max_aspect)))
  erase_h = tf.clip_by_value(tf.cast(tf.round(tf.sqrt(area * aspect)), tf.int32), 1, height)
  erase_w = tf.clip_by_value(tf.cast(tf.round(tf.sqrt(area / aspect)), tf.int32), 1, width)
  top = tf.random.stateless_uniform([], top_seed, 0, height - erase_h + 1, dtype=tf.int32)
  left = tf.random.stateless_uniform([], left_seed, 0, width - erase_w + 1, dtype=tf.int32)
  rows, cols = tf.range(height), tf.range(width)
  inside = (((rows >= top) & (rows < top + erase_h))[:, None]
            & ((cols >= left) & (cols < left + erase_w))[None, :])
  inside &= tf.random.stateless_uniform([], apply_seed) < probability
  noise = tf.random.stateless_uniform(shape, noise_seed, 0., 255.)
  return tf.where(inside[:, :, None], noise, tf.cast(image, tf.float32))
