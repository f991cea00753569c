"""The interface every dataset source implements (TFDS, image folders) and TFDS split strings.

A `Source` opens one dataset: its class names, each split as this process's `Split` (a share of
records with images still encoded or still file paths) and how many examples two split strings
share, so the pipeline can refuse to evaluate on training images whatever the source.
"""

import dataclasses
import functools
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

import tensorflow as tf
from absl import logging

_RECORDS_PER_READ = 256  # Records fetched together for a sequential (eval) pass.


def as_written(fn: Callable[..., Any]) -> Callable[..., Any]:
  """`fn` for `tf.data.Dataset.map`/`filter`, traced as written, without AutoGraph.

  By default tf.data rewrites each mapped function's Python source into graph control flow
  (AutoGraph) before tracing it. This package's pipeline functions are graph code already
  (`tf.cond`, `tf.while_loop`, `tf.switch_case`; Python `if`s test Python values only), so the
  rewrite changes nothing but costs time at every start: a 2-step run of the study's config
  (RandAugment) took 25.4 s with it and 23.7 s without on 2 vCPUs (docs/performance.md). A
  Python `if` on a tensor, which AutoGraph would have turned into a `tf.cond`, now fails when
  the pipeline is built.
  """
  return tf.autograph.experimental.do_not_convert(fn)


# (split name, first index, end index) of one contiguous part of a split string.
Range = Tuple[str, int, int]


@dataclasses.dataclass(frozen=True)
class Split:
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
  # How the shares cut the split: contiguous (share p holds the next shares[p] examples) or
  # strided (example j of the split is example j // len(shares) of share j % len(shares)).
  strided: bool = False

  @property
  def num_examples(self) -> int:
    return self.shares[self.index]


@dataclasses.dataclass(frozen=True)
class Source:
  """One opened dataset, whatever it is stored as."""
  class_names: Tuple[str, ...]
  # (split name as in `config.pp.*`, per_process) → this process's share, or the whole split.
  split: Callable[..., Split]
  # (train spec, eval spec) → how many eval examples are also train examples.
  overlap: Callable[[str, str], int]
  # What the data is, independent of where it is stored (a run's record compares it on a
  # rerun): {'kind': 'tfds', name, version, ...} or {'kind': 'folder', class_names, files}.
  identity: Callable[[], Dict[str, Any]]
  # A split spec → what it reads, for the log (e.g. "train[98%:] of /data: no test/ folder").
  describe: Callable[[str], str] = lambda spec: repr(spec)


def indexed_split(fetch: Callable[[tf.Tensor], Dict[str, tf.Tensor]],
                  read: Callable[[tf.Tensor], tf.Tensor], shares: Tuple[int, ...], index: int,
                  checked: bool = False, strided: bool = False) -> Split:
  """A random-access share; its sequential pass fetches records in order, a block at a time."""
  def make():
    ids = tf.data.Dataset.range(shares[index]).batch(_RECORDS_PER_READ)
    return ids.map(as_written(fetch), num_parallel_calls=tf.data.AUTOTUNE).unbatch()

  return Split(make=make, read=read, shares=shares, index=index, fetch=fetch, checked=checked,
               strided=strided)


def split_names(spec: str) -> List[str]:
  """The named splits a split string reads: `train[:98%]+test` → ['train', 'test']."""
  return [part.split('[')[0].strip() for part in spec.split('+')]


def absolute_ranges(spec: str, sizes: Dict[str, int]) -> List[Range]:
  """A TFDS split string (`train[:98%]`, `train[:1000]+test`) as index ranges of named splits.

  Raises:
    ValueError, AssertionError: a malformed spec or a split not in `sizes` (TFDS's errors).
  """
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top  # Only its parser.
  counts = {name: types.SimpleNamespace(num_examples=size) for name, size in sizes.items()}
  return [(r.splitname, r.from_ or 0, sizes[r.splitname] if r.to is None else r.to)
          for r in tfds.core.ReadInstruction.from_spec(spec).to_absolute(counts)]


def shared_examples(a: List[Range], b: List[Range]) -> int:
  """How many indices two lists of ranges have in common (ranges of one list are disjoint)."""
  return sum(max(0, min(x[2], y[2]) - max(x[1], y[1])) for x in a for y in b if x[0] == y[0])


@functools.cache
def log_once(message: str) -> None:
  logging.info(message)


@functools.cache
def warn_once(message: str) -> None:
  logging.warning(message)
