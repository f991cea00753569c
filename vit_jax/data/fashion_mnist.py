"""Prepares TFDS `fashion_mnist` from local idx files, for machines that cannot download it.

  python -m vit_jax.fashion_mnist [--data_dir=TFDS_DATA_DIR] [--source_dir=IDX_DIR]

(`scripts/setup.sh` installs the files.) A run with config.dataset='fashion_mnist' prepares the
TFDS copy too when it is missing and the local files exist: this module registers
`prepare_if_local` as the dataset's local preparer (`tfds_source.register_local_preparer`),
which looks in `config.tfds_manual_dir`, then $FASHION_MNIST_DIR, then Debian's folder.

Debian's `dataset-fashion-mnist` package ships the original idx files under
`/usr/share/datasets/fashion-mnist/`, re-gzipped, so their checksums differ from the ones TFDS
registers and TFDS's own download manager would reject them as a manual download. Instead, a
builder that subclasses TFDS's `FashionMNIST` (same name, version, features and splits) reads
the idx files directly and writes the usual TFDS files (ArrayRecord, for random access) into
the data dir. Afterwards `tfds.data_source('fashion_mnist', data_dir=...)` works, with or
without this module.
"""

import gzip
import os
import time
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
import tensorflow_datasets as tfds
from absl import logging

from vit_jax.data import tfds_source

DEFAULT_SOURCE_DIR = '/usr/share/datasets/fashion-mnist'
SOURCE_DIR_ENV = 'FASHION_MNIST_DIR'

# (images, labels) per TFDS split; the names of the original release and of Debian's package.
FILENAMES: Dict[str, Tuple[str, str]] = {
    'train': ('train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz'),
    'test': ('t10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz'),
}

_NEEDED = tuple(name for pair in FILENAMES.values() for name in pair)

# Third byte of an idx file's magic number → element type (all multi-byte types big-endian).
_IDX_DTYPES = {
    0x08: np.dtype('u1'),
    0x09: np.dtype('i1'),
    0x0B: np.dtype('>i2'),
    0x0C: np.dtype('>i4'),
    0x0D: np.dtype('>f4'),
    0x0E: np.dtype('>f8'),
}


def parse_idx(data: bytes, *, name: str = '<bytes>') -> np.ndarray:
  """Parses the bytes of one (uncompressed) idx file.

  The format is: two zero bytes, a type byte, a byte with the number of dimensions, that many
  big-endian uint32 sizes, then the elements in C order.

  Args:
    data: The whole file content.
    name: Used in error messages.

  Returns:
    The array, with native byte order.

  Raises:
    ValueError: When the header is not an idx header or the payload has the wrong size.
  """
  if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
    raise ValueError(f'{name} is not an idx file (bad magic number); re-install the files.')
  dtype, ndim = _IDX_DTYPES[data[2]], data[3]
  header = 4 + 4 * ndim
  if len(data) < header:
    raise ValueError(f'{name} is truncated inside its idx header; re-install the files.')
  shape = tuple(int(d) for d in np.frombuffer(data, dtype='>u4', count=ndim, offset=4))
  expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  if len(data) != expected:
    raise ValueError(
        f'{name} has {len(data)} bytes but its idx header {shape} needs {expected}; '
        're-install the files.')
  array = np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)
  return array.astype(dtype.newbyteorder('='))


def read_idx(path: str) -> np.ndarray:
  """Reads an idx file, gzipped (by its `.gz` name) or not."""
  opener = gzip.open if path.endswith('.gz') else open
  with opener(path, 'rb') as f:
    return parse_idx(f.read(), name=path)


def _candidates(source_dir: Optional[str]) -> List[str]:
  return [c for c in (source_dir, os.environ.get(SOURCE_DIR_ENV), DEFAULT_SOURCE_DIR) if c]


def local_source_dir(source_dir: Optional[str] = None) -> Optional[str]:
  """The first of `source_dir`, `$FASHION_MNIST_DIR` and the Debian folder with all four files."""
  for candidate in _candidates(source_dir):
    if all(os.path.isfile(os.path.join(candidate, name)) for name in _NEEDED):
      return candidate
  return None


def find_source_dir(source_dir: Optional[str] = None) -> str:
  """Returns the first of `source_dir`, `$FASHION_MNIST_DIR`, the Debian dir holding all files.

  Raises:
    ValueError: When none of them holds the four idx files.
  """
  found = local_source_dir(source_dir)
  if found:
    return found
  raise ValueError(
      f'no local copy of fashion_mnist was found (looked in {", ".join(_candidates(source_dir))} '
      f'for {", ".join(_NEEDED)}): run `apt-get install dataset-fashion-mnist`, or set '
      f'{SOURCE_DIR_ENV} (or config.tfds_manual_dir) to a folder with these files.')


def load_split(source_dir: str, split: str) -> Tuple[np.ndarray, np.ndarray]:
  """Returns (images uint8 [N, 28, 28, 1], labels int64 [N]) of one split, checked.

  Raises:
    ValueError: When the files disagree on N, images are not 28x28 uint8, or a label is not 0-9.
  """
  image_file, label_file = (os.path.join(source_dir, f) for f in FILENAMES[split])
  images, labels = read_idx(image_file), read_idx(label_file)
  if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (28, 28):
    raise ValueError(f'{image_file} holds {images.dtype} {images.shape}, not N x 28 x 28 uint8.')
  if labels.ndim != 1 or len(labels) != len(images):
    raise ValueError(f'{label_file} holds {labels.shape} labels for {len(images)} images.')
  if len(labels) and (labels.min() < 0 or labels.max() > 9):
    raise ValueError(f'{label_file} has labels outside 0-9; it is not Fashion-MNIST.')
  return images[..., None], labels.astype(np.int64)


class LocalFashionMNIST(tfds.image_classification.FashionMNIST, skip_registration=True):
  """TFDS `fashion_mnist` (same name, version, features, splits) built from local idx files.

  Not registered, so `tfds.builder('fashion_mnist')` still means TFDS's downloading builder;
  both read and write the same files in the data dir.
  """

  name = 'fashion_mnist'

  def __init__(self, *, source_dir: str, **kwargs):
    self._source_dir = source_dir
    super().__init__(**kwargs)

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing to download.
    return {split: self._examples(split) for split in FILENAMES}

  def _examples(self, split: str) -> Iterator[Tuple[int, dict]]:
    images, labels = load_split(self._source_dir, split)
    # Keys are the record index, as in TFDS's MNIST builders, so the order is the same.
    for index, (image, label) in enumerate(zip(images, labels)):
      yield index, {'image': image, 'label': label}


def prepare(data_dir: Optional[str] = None, source_dir: Optional[str] = None) -> None:
  """Writes TFDS `fashion_mnist` into `data_dir` (TFDS default when None) from local idx files.

  A no-op when `data_dir` already holds a prepared copy.

  Args:
    data_dir: TFDS data dir, as passed to `tfds.load(..., data_dir=...)`.
    source_dir: Folder with the four idx `.gz` files; see `find_source_dir` for the fallbacks.

  Raises:
    ValueError: When no folder has the files, or they are not Fashion-MNIST.
  """
  source_dir = find_source_dir(source_dir)
  # ArrayRecord gives the input pipeline random access (constant-time resume).
  builder = LocalFashionMNIST(source_dir=source_dir, data_dir=data_dir,
                              file_format='array_record')
  if builder.is_prepared():
    return
  logging.info('Preparing TFDS fashion_mnist in %s from %s', builder.data_dir, source_dir)
  start = time.time()
  builder.download_and_prepare(
      download_config=tfds.download.DownloadConfig(try_download_gcs=False))
  logging.info('Prepared fashion_mnist in %.1fs', time.time() - start)


def prepare_if_local(data_dir: Optional[str], source_dir: Optional[str]) -> bool:
  """`prepare` when a folder has the idx files; False (nothing done) when none has them."""
  if not local_source_dir(source_dir):
    return False
  prepare(data_dir, source_dir)
  return True


tfds_source.register_local_preparer('fashion_mnist', tfds_source.LocalPreparer(
    prepare=prepare_if_local,
    offline_hint=(' For fashion_mnist offline: `apt-get install dataset-fashion-mnist` or set '
                  'config.tfds_manual_dir to a folder with its idx files.')))
