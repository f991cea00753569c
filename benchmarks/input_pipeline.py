"""Train input pipeline throughput per CPU core: ours against the official recipe, JPEG data.

Generates a folder of JPEGs (ImageNet-like 500x375, smooth content) and the same images as a
TFDS dataset (ArrayRecord for ours, TFRecord for the official pipeline, which reads
`as_dataset`), then times batches of the train pipeline with the inception crop at 224 and 384
px, pinned to `--cores` CPU cores.

  python benchmarks/input_pipeline.py --cores=1 --images=256 --seconds=10

Each figure is images per second per core, and in parentheses images per CPU-second of the
process (steadier on a shared machine).
"""

import os
import tempfile
import time
from typing import Callable, Iterator, Tuple

import numpy as np
from absl import app
from absl import flags

_CLASSES = 4
_CORES = flags.DEFINE_integer('cores', 1, 'CPU cores the process is pinned to.')
_IMAGES = flags.DEFINE_integer('images', 256, 'JPEGs to generate.')
_BATCH = flags.DEFINE_integer('batch', 32, 'Images per batch.')
_SECONDS = flags.DEFINE_float('seconds', 10., 'Seconds each pipeline is timed at each size.')
_UINT8 = flags.DEFINE_bool('uint8_batches', False, 'Our pipelines with config.pp.uint8_batches '
                           '(uint8 batches, normalised by the train step).')
_WORKDIR = flags.DEFINE_string('workdir', None, 'Folder for the images and datasets, reused when '
                               'they exist (default: a new temporary folder).')


def _write_jpegs(root: str, count: int) -> None:
  from PIL import Image  # noqa: PLC0415
  rng = np.random.default_rng(0)
  y, x = np.mgrid[0:375, 0:500]
  for i in range(count):
    folder = os.path.join(root, 'train', f'class{i % _CLASSES}')
    os.makedirs(folder, exist_ok=True)
    phase = rng.uniform(0, 6, 3)
    image = 127 + 60 * np.sin(x[..., None] / 40 + phase) * np.cos(y[..., None] / 30 + phase)
    image += rng.normal(0, 8, image.shape)
    Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(
        os.path.join(folder, f'{i:05d}.jpg'), quality=90)


def _build_tfds(root: str, data_dir: str, file_format: str) -> None:
  """The folder as TFDS dataset `jpeg_bench` (JPEG bytes stored as they are)."""
  import tensorflow_datasets as tfds  # noqa: PLC0415

  class JpegBench(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """The generated JPEGs; one split."""
    VERSION = tfds.core.Version('1.0.0')
    name = 'jpeg_bench'

    def _info(self):
      return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
          'image': tfds.features.Image(encoding_format='jpeg'),
          'label': tfds.features.ClassLabel(num_classes=_CLASSES)}))

    def _split_generators(self, dl_manager):
      del dl_manager
      return {'train': self._generate_examples()}

    def _generate_examples(self):
      for c in range(_CLASSES):
        folder = os.path.join(root, 'train', f'class{c}')
        for name in sorted(os.listdir(folder)):
          yield f'{c}/{name}', {'image': os.path.join(folder, name), 'label': c}

  JpegBench(data_dir=data_dir, file_format=file_format).download_and_prepare()


def _official(dataset, crop: int, batch: int):
  """The official train recipe (google-research/vision_transformer input_pipeline.py)."""
  import tensorflow as tf  # noqa: PLC0415

  def pp(data):
    im = tf.io.decode_jpeg(data['image'], channels=3)
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        tf.shape(im), tf.zeros([0, 0, 4], tf.float32), area_range=(0.05, 1.0),
        min_object_covered=0, use_image_if_no_bounding_boxes=True)
    im = tf.slice(im, begin, size)
    im.set_shape([None, None, 3])
    im = tf.image.resize(im, [crop, crop])
    im = tf.cond(tf.random.uniform([]) > 0.5, lambda: tf.image.flip_left_right(im), lambda: im)
    return {'image': (im - 127.5) / 127.5, 'label': tf.one_hot(data['label'], _CLASSES)}

  data = dataset.repeat().shuffle(50_000).map(pp, tf.data.AUTOTUNE)
  return iter(data.batch(batch, drop_remainder=True).prefetch(1))


def _rate(batches: Iterator, batch: int, seconds: float) -> Tuple[float, float]:
  """(images per second, images per CPU-second of this process) over `seconds`.

  The second is the steadier figure on a shared machine: other processes' load lowers the
  first, while it changes the CPU time an image costs much less.
  """
  next(batches)  # Start-up and the first batch are not throughput.
  count, start, cpu = 0, time.perf_counter(), _cpu_seconds()
  while time.perf_counter() - start < seconds:
    next(batches)
    count += 1
  return (count * batch / (time.perf_counter() - start),
          count * batch / max(_cpu_seconds() - cpu, 1e-9))


def _timed(batches: Iterator, batch: int, seconds: float) -> Tuple[float, float]:
  """`_rate`, then the pipeline is closed: its threads stop before the next one is timed."""
  rates = _rate(batches, batch, seconds)
  getattr(batches, 'close', lambda: None)()  # Ours (a generator); the official one has none.
  return rates


def _cpu_seconds() -> float:
  return sum(os.times()[:2])  # User + system time of this process (all its threads).


def main(argv) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments {argv[1:]}.')
  cores, batch, seconds = _CORES.value, _BATCH.value, _SECONDS.value
  os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cores])
  import tensorflow as tf  # noqa: PLC0415  # After pinning, so its pools size to the cores.
  import tensorflow_datasets as tfds  # noqa: PLC0415
  from vit_jax import config_lib, input_pipeline  # noqa: PLC0415
  from vit_jax.training import settings  # noqa: PLC0415
  root = _WORKDIR.value or tempfile.mkdtemp(prefix='pipeline_bench_')
  if not os.path.isdir(os.path.join(root, 'train')):
    _write_jpegs(root, _IMAGES.value)
  for file_format in ('array_record', 'tfrecord'):
    data_dir = os.path.join(root, f'tfds_{file_format}')
    if not os.path.isdir(data_dir):
      _build_tfds(root, data_dir, file_format)
  paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(root, 'train'))
                 for f in fs)
  folder_ds = tf.data.Dataset.from_tensor_slices(
      {'image': paths, 'label': [int(p.split(os.sep)[-2][5:]) for p in paths]}).map(
          lambda e: {'image': tf.io.read_file(e['image']), 'label': e['label']})
  tfrecord = tfds.builder_from_directory(
      os.path.join(root, 'tfds_tfrecord', 'jpeg_bench', '1.0.0')).as_dataset(
          split='train', decoders={'image': tfds.decode.SkipDecoding()}, shuffle_files=True)
  ours_tfds = os.path.join(root, 'tfds_array_record')

  def ours(dataset: str, data_dir=None) -> Callable[[int], Iterator]:
    def make(crop):
      config = config_lib.get_config()
      config.update(dict(dataset=dataset, tfds_data_dir=data_dir, batch=batch))
      config.pp.update(dict(train='train', crop=crop, train_aug='inception'))
      if _UINT8.value:  # Else the field keeps its default (older code has no such field).
        config.pp.uint8_batches = True
      return input_pipeline.get_train_data(settings.data(config))
    return make

  pipelines = {
      'ours, folder': ours(root),
      'official, folder': lambda crop: _official(folder_ds, crop, batch),
      'ours, TFDS (ArrayRecord)': ours('jpeg_bench', ours_tfds),
      'official, TFDS (TFRecord)': lambda crop: _official(tfrecord, crop, batch),
  }
  print(f'{len(paths)} JPEGs 500x375, batch {batch}, {cores} core(s), '
        f'{seconds:.0f} s each; images/s per core (images per CPU-second)')
  print('| pipeline | 224 px | 384 px |\n|---|---|---|')
  for name, make in pipelines.items():
    rates = [_timed(make(crop), batch, seconds) for crop in (224, 384)]
    print(f'| {name} | ' + ' | '.join(f'{wall / cores:.0f} ({cpu:.0f})' for wall, cpu in rates)
          + ' |', flush=True)


if __name__ == '__main__':
  app.run(main)
