"""The train stream: examples in an order that is a function of the seed and the position.

Sources with random access (image folders, TFDS ArrayRecord) address records by index:
position p reads record `index_shuffle(p % N)` of epoch p // N's permutation, so resuming at any
step costs the same and, with data_sharding='stream', each process reads only its slice of each
global batch. Sources without random access (TFDS TFRecord) give the official shuffle-buffer
stream, and resuming skips (reads) every earlier example. `numpy_batches` turns a tf.data
pipeline into numpy batches with one-line errors; a file no decoder reads is named in it
(`undecodable_file`).
"""

import re
from typing import Callable, Dict, Iterator, Optional

import jax
import numpy as np
import tensorflow as tf

from vit_jax import config_lib
from vit_jax.data import image_ops
from vit_jax.data import image_check
from vit_jax.data import sources

# A train record that cannot be read is replaced by the next position's; this many in a row fail.
_MAX_UNREADABLE_IN_A_ROW = 16

Batch = Dict[str, np.ndarray]


def sharding(mode: str) -> str:
  """`mode` (`config.data_sharding`), checked.

  'split': each process reads only its share of the files (scales to pods; the default).
  'stream': each process reads the whole shuffled stream and keeps its slice of each global
  batch: results identical for any number of processes (costs reading everything everywhere).
  """
  return config_lib.check_choice('data_sharding', mode)


def process_seed(seed: int, shared: bool = False) -> tf.Tensor:
  """A stateless seed per (seed, process), so processes augment independently.

  With `shared` (the 'stream' sharding) positions are global, so one seed serves all processes.
  """
  process = 0 if shared else jax.process_index()
  return tf.constant([int(seed), process], tf.int64)


def train_stream(split: sources.Split, start: int, local_batch: int, stream: bool, *,
                 seed: int, shuffle_buffer: int) -> tf.data.Dataset:
  """(position, example with encoded image) from this process's example number `start` on.

  The order is a function of `seed` (and, without random access, of `shuffle_buffer`).
  """
  if split.fetch:
    return _indexed_stream(split, start, local_batch, stream, seed)
  return _skipping_stream(split, start, local_batch, stream, seed, shuffle_buffer)


def _indexed_stream(split: sources.Split, start: int, local_batch: int, stream: bool,
                    seed: int) -> tf.data.Dataset:
  """Position p is record `index_shuffle(p % N)` of epoch p // N's permutation.

  Every record once per epoch, so starting anywhere costs the same. In the 'stream' sharding
  positions are global and each process computes those of its own slice of every global batch.
  """
  count, index = (jax.process_count(), jax.process_index()) if stream else (1, 0)
  size = split.num_examples
  order_seed = tf.constant([int(seed), 2], tf.int64)

  def positions(k):  # This process's examples k (a block, in order) → their stream positions.
    return (k // local_batch) * (local_batch * count) + index * local_batch + k % local_batch

  def fetch(k):
    p = positions(k)
    return p, split.fetch(shuffled_records(p, size, order_seed))

  # Positions, records and reads a block at a time: per example, these maps cost as much CPU
  # as the quickstart's decoding and preprocessing together (docs/performance.md).
  ds = tf.data.Dataset.range(start, np.iinfo(np.int64).max).batch(local_batch)
  ds = ds.map(sources.as_written(fetch), num_parallel_calls=tf.data.AUTOTUNE).unbatch()
  record = lambda p: shuffled_record(p, size, order_seed)  # noqa: E731
  return ds.map(sources.as_written(
      lambda p, example: (p, _read_train_example(split, example, p, record))),
                num_parallel_calls=tf.data.AUTOTUNE)


def shuffled_record(position: tf.Tensor, size: int, order_seed: tf.Tensor) -> tf.Tensor:
  """The record at stream `position`: `index_shuffle(p % size)` of epoch p // size's order."""
  return _in_epoch_order(position % size, position // size, size, order_seed)


def shuffled_records(positions: tf.Tensor, size: int, order_seed: tf.Tensor) -> tf.Tensor:
  """`shuffled_record` of each of increasing `positions` [n]: one shuffle per epoch they span."""
  epochs = positions // size

  def add_epoch(epoch, records):
    in_epoch = _in_epoch_order(positions % size, epoch, size, order_seed)
    return epoch + 1, tf.where(epochs == epoch, in_epoch, records)

  _, records = tf.while_loop(lambda epoch, _: epoch <= epochs[-1], add_epoch,
                             (epochs[0], tf.zeros_like(positions)))
  return records


def _in_epoch_order(indices: tf.Tensor, epoch: tf.Tensor, size: int,
                    order_seed: tf.Tensor) -> tf.Tensor:
  """Records at `indices` (a scalar or a vector) of scalar `epoch`'s permutation of the split."""
  epoch_seed = tf.random.experimental.stateless_fold_in(order_seed, epoch)
  return tf.random.experimental.index_shuffle(indices, epoch_seed,
                                              tf.constant(size - 1, tf.int64))


def _read_train_example(split: sources.Split, example: Dict[str, tf.Tensor], position: tf.Tensor,
                        record: Callable[[tf.Tensor], tf.Tensor]) -> Dict[str, tf.Tensor]:
  """The example with its image bytes; a broken file is replaced by the next position's record.

  The replacement depends only on the position, so the stream stays exactly resumable. A file
  source's example keeps its path as 'file' (`undecodable_file` names it).
  """
  data = split.read(example['image'])
  if not split.checked:
    return {'image': data, 'label': example['label']}

  def next_record(tries, name, data, label, ok):
    del name, data, label, ok
    replacement = split.fetch(record(position + tries)[None])
    name = replacement['image'][0]
    data = split.read(name)
    return tries + 1, name, data, replacement['label'][0], image_check.readable(data, name)

  tries, name, data, label, ok = tf.while_loop(
      lambda tries, name, data, label, ok: tf.logical_and(tf.logical_not(ok),
                                                          tries < _MAX_UNREADABLE_IN_A_ROW),
      next_record, (tf.constant(1, tf.int64), example['image'], data, example['label'],
                    image_check.readable(data, example['image'])))
  del tries
  tf.debugging.assert_equal(ok, True, message=f'{_MAX_UNREADABLE_IN_A_ROW} unreadable image '
                            'files in a row (see the warnings above); fix the dataset.')
  return {'image': data, 'label': label, 'file': name}


def _skipping_stream(split: sources.Split, start: int, local_batch: int, stream: bool,
                     seed: int, shuffle_buffer: int) -> tf.data.Dataset:
  """The official shuffle-buffer stream for sources without random access; skips to `start`.

  Repeat before shuffle (as the official pipeline): one shuffle spans epoch boundaries, so the
  stream is a function of the seed and the position. Resuming reads every skipped example.
  """
  buffer = max(1, min(int(shuffle_buffer), split.num_examples))
  ds = split.make().repeat().shuffle(buffer, seed=int(seed)).enumerate()
  if stream:
    # Every process walks the same shuffled stream and keeps its slice of each global batch:
    # the global batches, and so training, do not depend on the number of processes.
    count, index = jax.process_count(), jax.process_index()
    ds = ds.skip(start * count)
    ds = ds.filter(sources.as_written(
        lambda position, _: (position // local_batch) % count == index))
  else:
    ds = ds.skip(start)
  return ds.map(sources.as_written(
      lambda position, example: (position, {'image': split.read(example['image']),
                                            'label': example['label']})))


def numpy_batches(ds: tf.data.Dataset,
                  locate: Optional[Callable[[int], Optional[str]]] = None) -> Iterator[Batch]:
  """The elements of `ds` as numpy; an error in the pipeline is a one-line ValueError.

  A decoder's error names no file ("Invalid PNG data, size 2444"): `locate(k)`, when given,
  says which file of batch k (the one that failed; batches are read in order) it is.

  The failed tf.data iterator is dropped before the error is raised, so it is destroyed now, not
  at interpreter exit: destroyed then, its worker threads wait for Python calls that can no
  longer run (a `numpy_function` needs the interpreter) and the process never exits.
  """
  iterator, message, done, asserted = ds.as_numpy_iterator(), '', 0, False
  while not message:
    try:
      batch = next(iterator)
    except StopIteration:
      return
    except tf.errors.OpError as e:
      message, asserted = _pipeline_error_line(e), _ASSERTION in e.message
    else:
      done += 1
      yield batch
  del iterator
  found = locate(done) if locate and not asserted else None
  raise ValueError(f'The input pipeline failed: {found or message}')


def train_locator(split: sources.Split, start: int, local_batch: int, stream: bool, *,
                  seed: int, shuffle_buffer: int) -> Optional[Callable[[int], Optional[str]]]:
  """`numpy_batches`'s `locate` for the train batches of a file source from example `start`:
  batch k's examples again (two batches, in case a later one failed), without decoding."""
  if not split.checked:
    return None  # No file paths (TFDS records).

  def locate(k: int) -> Optional[str]:
    examples = train_stream(split, start + k * local_batch, local_batch, stream, seed=seed,
                            shuffle_buffer=shuffle_buffer)
    return undecodable_file(
        examples.map(sources.as_written(lambda _, example: example)).take(2 * local_batch))

  return locate


def eval_locator(split: sources.Split,
                 local_batch: int) -> Optional[Callable[[int], Optional[str]]]:
  """`numpy_batches`'s `locate` for the eval batches of a file source (`train_locator`)."""
  if not split.checked:
    return None

  def locate(k: int) -> Optional[str]:
    examples = split.make().skip(k * local_batch).take(2 * local_batch)
    return undecodable_file(examples.map(sources.as_written(
        lambda example: {'file': example['image'], 'image': split.read(example['image'])})))

  return locate


def undecodable_file(examples: tf.data.Dataset) -> Optional[str]:
  """The first file of `examples` ({'file': path, 'image': its bytes}) that `image_ops.decode`
  cannot read (a broken file that `image_check.readable` lets through), as one line; else None."""
  iterator = iter(examples)
  while True:
    try:
      example = next(iterator)
    except (StopIteration, tf.errors.OpError):
      return None
    if not image_check.readable(example['image'], example['file']):
      continue  # Skipped (train) or masked out (eval), never decoded.
    try:
      image_ops.decode(example['image'])
    except tf.errors.OpError as e:
      path = example['file'].numpy().decode(errors='replace')
      return (f'{path} cannot be decoded ({_pipeline_error_line(e)}): the file is damaged; '
              'delete or replace it.')


_ASSERTION = 'assertion failed: ['


def _pipeline_error_line(error: tf.errors.OpError) -> str:
  """The reason in TF's error: an assertion's own message, else the text after the op chain."""
  text = error.message.strip()
  asserted = re.search(r'assertion failed: \[([^\]]*)\]', text)
  if asserted:
    return asserted.group(1)
  text = re.sub(r'\{\{[^}]*\}\}\s*', '', text.splitlines()[0] if text else type(error).__name__)
  text = re.sub(r'\s*\[Op:\w+\].*$', '', text)  # An eager op's name ("[Op:DecodeImage] name:").
  return re.sub(r'^Error in user-defined function .*? with iterator: \S+: ', '', text)
