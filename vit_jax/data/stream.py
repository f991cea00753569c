"""The train stream: examples in an order that is a function of the seed and the position.

Sources with random access (image folders, TFDS ArrayRecord) address records by index:
position p reads record `index_shuffle(p % N)` of epoch p // N's permutation, so resuming at any
step costs the same and, with data_sharding='stream', each process reads only its slice of each
global batch. Sources without random access (TFDS TFRecord) give the official shuffle-buffer
stream, and resuming skips (reads) every earlier example. `numpy_batches` turns a tf.data
pipeline into numpy batches with one-line errors.
"""

import re
from typing import Any, Callable, Dict, Iterator

import jax
import numpy as np
import tensorflow as tf

from vit_jax import config_lib
from vit_jax.data import image_ops
from vit_jax.data import sources

# A train record that cannot be read is replaced by the next position's; this many in a row fail.
_MAX_UNREADABLE_IN_A_ROW = 16

Batch = Dict[str, np.ndarray]


def sharding(config: Any) -> str:
  """'split': each process reads only its share of the files (scales to pods; the default).

  'stream': each process reads the whole shuffled stream and keeps its slice of each global
  batch: results identical for any number of processes (costs reading everything everywhere).
  """
  return config_lib.check_choice('data_sharding', config.data_sharding)


def process_seed(config: Any, shared: bool = False) -> tf.Tensor:
  """A stateless seed per (config.seed, process), so processes augment independently.

  With `shared` (the 'stream' sharding) positions are global, so one seed serves all processes.
  """
  process = 0 if shared else jax.process_index()
  return tf.constant([int(config.seed), process], tf.int64)


def train_stream(config: Any, split: sources.Split, start: int, local_batch: int,
                 stream: bool) -> tf.data.Dataset:
  """(position, example with encoded image) from this process's example number `start` on."""
  make_stream = _indexed_stream if split.fetch else _skipping_stream
  return make_stream(config, split, start, local_batch, stream)


def _indexed_stream(config: Any, split: sources.Split, start: int, local_batch: int,
                    stream: bool) -> tf.data.Dataset:
  """Position p is record `index_shuffle(p % N)` of epoch p // N's permutation.

  Every record once per epoch, so starting anywhere costs the same. In the 'stream' sharding
  positions are global and each process computes those of its own slice of every global batch.
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


def _read_train_example(split: sources.Split, example: Dict[str, tf.Tensor], position: tf.Tensor,
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
    return tries + 1, data, replacement['label'][0], image_ops.readable(data,
                                                                     replacement['image'][0])

  tries, data, label, ok = tf.while_loop(
      lambda tries, data, label, ok: tf.logical_and(tf.logical_not(ok),
                                                    tries < _MAX_UNREADABLE_IN_A_ROW),
      next_record, (tf.constant(1, tf.int64), data, example['label'],
                    image_ops.readable(data, example['image'])))
  del tries
  tf.debugging.assert_equal(ok, True, message=f'{_MAX_UNREADABLE_IN_A_ROW} unreadable image '
                            'files in a row (see the warnings above); fix the dataset.')
  return {'image': data, 'label': label}


def _skipping_stream(config: Any, split: sources.Split, start: int, local_batch: int,
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


def numpy_batches(ds: tf.data.Dataset) -> Iterator[Batch]:
  """The elements of `ds` as numpy; an error in the pipeline is a one-line ValueError.

  The failed tf.data iterator is dropped before the error is raised, so it is destroyed now, not
  at interpreter exit: destroyed then, its worker threads wait for Python calls that can no
  longer run (a `numpy_function` needs the interpreter) and the process never exits.
  """
  iterator, message = ds.as_numpy_iterator(), ''
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
