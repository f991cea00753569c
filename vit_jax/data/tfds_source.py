"""TFDS datasets as a dataset source: prepared on first use, read by index when ArrayRecord.

A dataset not yet prepared in its data_dir (`config.tfds_data_dir`) is prepared from local files
when a local preparer is registered for it and finds them (`register_local_preparer`: e.g.
Fashion-MNIST from Debian's idx files), else downloaded by TFDS as ArrayRecord (random access:
resume in constant time). A download that cannot start is one short attempt and a one-line
error with what to do.
"""

import contextlib
import dataclasses
import functools
from typing import Any, Callable, Dict, Iterator, List, Optional

import jax
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from tensorflow_datasets.core.download import downloader as tfds_downloader

from vit_jax.data import sources

_SKIP_DECODING = {'image': tfds.decode.SkipDecoding()}
# TFDS retries a failed request 10 times with exponential backoff (~3.5 minutes offline); this
# many retries wait 1.4 s in all, and a real network error still fails the attempt.
_DOWNLOAD_RETRIES = 3


@dataclasses.dataclass(frozen=True)
class LocalPreparer:
  """Prepares a TFDS dataset from files on this machine instead of downloading it."""
  # (tfds_data_dir, folder with the dataset's files or None) → True if prepared, False if it
  # found no local files. Raises ValueError for files that are not the dataset.
  prepare: Callable[[Optional[str], Optional[str]], bool]
  offline_hint: str  # Appended to the "cannot be downloaded" error: how to get the files.


_LOCAL_PREPARERS: Dict[str, LocalPreparer] = {}


def register_local_preparer(name: str, preparer: LocalPreparer) -> None:
  """Makes `open_tfds` prepare TFDS dataset `name` with `preparer` when it is not prepared."""
  _LOCAL_PREPARERS[name] = preparer


def open_tfds(name: str, data_dir: Optional[str] = None,
              manual_dir: Optional[str] = None) -> sources.Source:
  """TFDS dataset `name` (`config.dataset`) as a source, prepared first if needed.

  `data_dir` is where TFDS keeps it (None: TFDS's default); `manual_dir` a folder with its
  files (a manual download, or what a local preparer reads).

  Raises:
    ValueError: an unknown name, a dataset without image + label, or one that cannot be
      prepared (offline, a manual download without config.tfds_manual_dir).
  """
  builder = _prepared_builder(name, data_dir, manual_dir)
  features = builder.info.features
  keys = features.keys()
  if ('image' not in keys or 'label' not in keys
      or not isinstance(features['image'], tfds.features.Image)
      or not isinstance(features['label'], tfds.features.ClassLabel)):
    raise ValueError(f'TFDS dataset {name!r} has no image + class label features; '
                     'use an image classification dataset.')
  indexed = builder.info.file_format == tfds.core.FileFormat.ARRAY_RECORD
  if not indexed:
    sources.warn_once(
        f'TFDS dataset {builder.name} in {builder.data_dir} is prepared as '
        f'{builder.info.file_format.value}, which has no random access: resuming at step s '
        're-reads s batches. Re-prepare it with file_format="array_record" for resume in '
        'constant time (see docs/input_pipeline.md).')

  def split(spec: str, per_process: bool = True) -> sources.Split:
    specs = _process_splits(spec) if per_process else [spec]
    index = jax.process_index() if per_process else 0
    if indexed:
      data_sources = [_data_source(builder, s, spec) for s in specs]
      return sources.indexed_split(_fetch(data_sources[index], features), lambda image: image,
                                   tuple(len(s) for s in data_sources), index)
    return sources.Split(
        make=lambda: _dataset(builder, specs[index], spec),
        read=lambda image: image,
        shares=tuple(_count(_dataset(builder, s, spec)) for s in specs), index=index)

  return sources.Source(class_names=tuple(features['label'].names), split=split,
                        overlap=functools.partial(_overlap, split),
                        identity=functools.partial(_identity, builder),
                        describe=lambda spec: f'{spec!r} of {builder.name}')


def _identity(builder: tfds.core.DatasetBuilder) -> Dict[str, Any]:
  """A TFDS dataset is its name, builder config and version (its data_dir may move)."""
  config = builder.builder_config.name if builder.builder_config else None
  return {'kind': 'tfds', 'name': builder.name, 'config': config,
          'version': str(builder.info.version),
          'class_names': list(builder.info.features['label'].names)}


def _overlap(split: Callable[..., sources.Split], train: str, test: str) -> int:
  """Examples in both split specs: their index ranges over the same named split intersected."""
  names = set(sources.split_names(train) + sources.split_names(test))
  sizes = {name: sum(split(name, per_process=False).shares) for name in names}
  return sources.shared_examples(sources.absolute_ranges(train, sizes),
                                 sources.absolute_ranges(test, sizes))


def _read_error(builder: tfds.core.DatasetBuilder, name: str, error: Exception) -> ValueError:
  splits = ', '.join(builder.info.splits) or 'see the TFDS catalog'
  return ValueError(f'Cannot read split {name!r} of {builder.name} ({splits}): '
                    f'{str(error).splitlines()[0]}; fix config.pp.train / config.pp.test.')


def _data_source(builder: tfds.core.DatasetBuilder, split: Any, name: str) -> Any:
  """The split's records as their serialized bytes (`_fetch` parses them)."""
  try:
    return builder.as_data_source(split=split,
                                  deserialize_method=tfds.decode.DeserializeMethod.RAW_BYTES)
  except (KeyError, ValueError, AssertionError) as e:
    raise _read_error(builder, name, e) from e


def _fetch(source: Any, features: tfds.features.FeaturesDict
           ) -> Callable[[tf.Tensor], Dict[str, tf.Tensor]]:
  """Record ids → {'image': encoded bytes, 'label'} of a TFDS data source of serialized records.

  ArrayRecord reads the records (one Python call per block of ids); TF parses them
  (`tf.io.parse_example`, the tf.train.Example features TFDS wrote), with the image left
  encoded as `SkipDecoding` leaves it. TFDS's own deserialisation runs in Python per record:
  ~120 µs of CPU per Fashion-MNIST image, holding the GIL (docs/performance.md).
  """
  spec = {}
  for key in ('image', 'label'):
    info = features[key].get_serialized_info()
    spec[key] = tf.io.FixedLenFeature(info.shape, info.dtype)

  def read(ids: np.ndarray) -> np.ndarray:
    return np.array(source.__getitems__([int(i) for i in ids]), dtype=object)

  def fetch(ids: tf.Tensor) -> Dict[str, tf.Tensor]:
    records = tf.numpy_function(read, [ids], tf.string, stateful=False)
    records.set_shape(ids.shape)
    return tf.io.parse_example(records, spec)

  return fetch


def _process_splits(name: str) -> List[Any]:
  """`name` cut into one contiguous share per process (sizes differ by at most one)."""
  if jax.process_count() == 1:
    return [name]
  return list(tfds.even_splits(name, n=jax.process_count(), drop_remainder=False))


def _dataset(builder: tfds.core.DatasetBuilder, split: Any, name: str) -> tf.data.Dataset:
  try:
    ds = builder.as_dataset(split=split, decoders=_SKIP_DECODING, shuffle_files=False)
  except (KeyError, ValueError, AssertionError) as e:
    raise _read_error(builder, name, e) from e
  return ds.map(sources.as_written(
      lambda example: {'image': example['image'], 'label': example['label']}))


def _count(ds: tf.data.Dataset) -> int:
  """Examples in `ds`: its cardinality (known for TFDS splits), else one pass to count."""
  cardinality = int(ds.cardinality())
  if cardinality >= 0:
    return cardinality
  return int(ds.reduce(np.int64(0), lambda count, _: count + 1))


def _prepared_builder(name: str, data_dir: Optional[str],
                      files_dir: Optional[str]) -> tfds.core.DatasetBuilder:
  """The TFDS builder of dataset `name`, prepared (or a clear ValueError)."""
  try:
    builder = tfds.builder(name, data_dir=data_dir)
  except (tfds.core.registered.DatasetNotFoundError, ValueError, AssertionError) as e:
    raise ValueError(f'Unknown dataset {name!r}: not a TFDS name ({str(e).splitlines()[0]}) and '
                     'not a directory with train/<class>/*.jpg and test/<class>/*.jpg.') from None
  if builder.is_prepared():
    return builder
  local = _LOCAL_PREPARERS.get(builder.name)
  if local and local.prepare(data_dir, files_dir):
    return tfds.builder(name, data_dir=data_dir)
  try:
    with _few_download_retries():  # Prepared as ArrayRecord, it has random access.
      builder.download_and_prepare(
          file_format='array_record',
          download_config=tfds.download.DownloadConfig(manual_dir=files_dir))
  except Exception as e:  # noqa: BLE001  # Network, checksum, disk errors: all mean offline.
    if builder.MANUAL_DOWNLOAD_INSTRUCTIONS and not files_dir:
      raise ValueError(f'TFDS dataset {name!r} needs a manual download: set '
                       'config.tfds_manual_dir to the folder with its files (see the TFDS '
                       'catalog), or config.tfds_data_dir to where it is already prepared.') from e
    reason = f'{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ""}'
    raise _not_prepared(name, builder, f'the download failed ({reason})') from e
  return builder


@contextlib.contextmanager
def _few_download_retries() -> Iterator[None]:
  """One short download attempt: TFDS's retries of a failed request bounded while it runs."""
  retries = tfds_downloader.MAX_RETRIES
  tfds_downloader.MAX_RETRIES = min(retries, _DOWNLOAD_RETRIES)
  try:
    yield
  finally:
    tfds_downloader.MAX_RETRIES = retries


def _not_prepared(name: str, builder: tfds.core.DatasetBuilder, reason: str) -> ValueError:
  local = _LOCAL_PREPARERS.get(builder.name)
  return ValueError(
      f'TFDS dataset {name!r} is not prepared in {builder.data_dir} and cannot be '
      f'downloaded: {reason}. Set config.tfds_data_dir to a folder where it is prepared, '
      'config.tfds_manual_dir to its downloaded files, or config.dataset to a directory of '
      f'images (train/<class>/*.jpg, test/<class>/*.jpg).{local.offline_hint if local else ""}')
