"""Input pipeline: shapes, ranges, exact eval, resume, processes, folders, errors (offline)."""

import functools
import io
import os
import socket
import time
from unittest import mock

import jax
import ml_collections
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image
from tensorflow_datasets.core.download import downloader

from vit_jax import config_lib
from vit_jax import input_pipeline
from vit_jax.training import settings
from vit_jax.data import augment
from vit_jax.data import image_ops
from vit_jax.data import randaugment
from vit_jax.data import stream


def make_config(**overrides) -> ml_collections.ConfigDict:
  """The base config on mock CIFAR-10 at 16px, batches of 4."""
  config = config_lib.get_config()
  config.update(dict(dataset='cifar10', batch=4, batch_eval=4, shuffle_buffer=100, prefetch=1,
                     pp=dict(train='train', test='test', crop=16)))
  config.update(overrides)
  return config



def take(iterator, n):
  return [next(iterator) for _ in range(n)]


def assert_batches_equal(a, b):
  assert len(a) == len(b)
  for x, y in zip(a, b):
    assert x.keys() == y.keys()
    for key in x:
      np.testing.assert_array_equal(x[key], y[key])


def write_image_folder(root, files_per_class=3, test_files=2):
  """A tiny directory dataset: RGB JPEGs, grayscale PNGs and RGBA PNGs, plus one corrupt file."""
  rng = np.random.default_rng(0)
  for split, count in (('train', files_per_class), ('test', test_files)):
    for c, mode in enumerate(('RGB', 'L', 'RGBA')):
      folder = os.path.join(root, split, f'class{c}')
      os.makedirs(folder)
      for i in range(count):
        shape = (12, 10) if mode == 'L' else (12, 10, len(mode))
        image = Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode)
        image.save(os.path.join(folder, f'{i}.{"jpg" if mode == "RGB" else "png"}'))
  with open(os.path.join(root, 'train', 'class0', 'corrupt.jpg'), 'wb') as f:
    f.write(b'\xff\xd8\xff not really a jpeg')
  with open(os.path.join(root, 'train', 'class0', 'notes.txt'), 'w') as f:
    f.write('ignored: not an image extension')


@pytest.mark.parametrize('train_aug', config_lib.CHOICES['pp.train_aug'])
def test_train_batches(mock_cifar10, train_aug):
  config = make_config()
  config.pp.train_aug = train_aug
  batch = next(input_pipeline.get_train_data(settings.data(config)))
  assert batch['image'].shape == (4, 16, 16, 3) and batch['image'].dtype == np.float32
  assert batch['label'].shape == (4, 10) and batch['label'].dtype == np.float32
  assert -1. <= batch['image'].min() and batch['image'].max() <= 1.
  np.testing.assert_allclose(batch['label'].sum(-1), 1., rtol=1e-6)


def test_randaugment_keeps_shape_and_range(mock_cifar10):
  config = make_config()
  config.pp.randaug.num_layers = 3
  batch = next(input_pipeline.get_train_data(settings.data(config)))
  assert batch['image'].shape == (4, 16, 16, 3)
  assert -1. <= batch['image'].min() and batch['image'].max() <= 1.


def test_random_erase_train_batches_keep_shape_and_range(mock_cifar10):
  config = make_config()
  config.pp.random_erase = 1.
  erased = next(input_pipeline.get_train_data(settings.data(config)))
  plain = next(input_pipeline.get_train_data(settings.data(make_config())))
  assert erased['image'].shape == (4, 16, 16, 3)
  assert -1. <= erased['image'].min() and erased['image'].max() <= 1.
  np.testing.assert_array_equal(erased['label'], plain['label'])
  differs = np.any(erased['image'] != plain['image'], axis=-1)  # [4, 16, 16]
  assert differs.any(axis=(1, 2)).all()  # Same crops and flips; every image has its rectangle.


@pytest.mark.parametrize('seed', range(20))
def test_random_erase_is_one_rectangle_of_the_paper_s_size(seed):
  image = tf.fill([40, 30, 3], 300.)  # Out of the noise's range, so every erased pixel shows.
  erased = augment.random_erase(image, 1., tf.constant([seed, 7])).numpy()
  inside = np.all(erased != 300., axis=-1)
  assert np.array_equal(inside, np.any(erased != 300., axis=-1))  # All channels or none.
  rows, cols = np.nonzero(inside.any(1))[0], np.nonzero(inside.any(0))[0]
  assert inside[rows.min():rows.max() + 1, cols.min():cols.max() + 1].all()  # A filled box...
  assert inside.sum() == len(rows) * len(cols)  # ...and nothing outside it.
  assert 0.5 * 0.02 * 1200 <= inside.sum() <= 0.4 * 1200 * 1.3  # 2-40% of the area, rounded.
  assert 0. <= erased[inside].min() and erased[inside].max() <= 255.
  again = augment.random_erase(image, 1., tf.constant([seed, 7])).numpy()
  np.testing.assert_array_equal(erased, again)


def test_random_erase_probability():
  image = tf.fill([8, 8, 1], 300.)
  erased = [np.any(augment.random_erase(image, 0.25, tf.constant([s, 0])).numpy() != 300.)
            for s in range(400)]
  assert 0.17 < np.mean(erased) < 0.33
  assert not np.any(augment.random_erase(image, 0., tf.constant([1, 0])).numpy() != 300.)


def test_dataset_info(mock_cifar10):
  info = input_pipeline.get_dataset_info(settings.data(make_config()))
  assert (info.num_classes, info.num_train_examples, info.num_test_examples) == (10, 10, 10)
  assert len(info.class_names) == 10


def test_eval_is_exact(mock_cifar10):
  eval_data = input_pipeline.get_eval_data(settings.data(make_config()))
  batches = list(eval_data.batches())
  assert eval_data.num_examples == 10 and eval_data.num_batches == 3 and len(batches) == 3
  assert sum(b['mask'].sum() for b in batches) == 10
  np.testing.assert_array_equal(batches[-1]['mask'], [1., 1., 0., 0.])
  for b in batches:
    assert b['image'].shape == (4, 16, 16, 3) and b['label'].shape == (4, 10)
    assert b['mask'].dtype == np.float32
    np.testing.assert_array_equal(b['label'].sum(-1), b['mask'])
    assert -1. <= b['image'].min() and b['image'].max() <= 1.
  assert len(list(eval_data.batches())) == 3  # A second, fresh pass.


def test_train_is_deterministic_and_resumable(mock_cifar10):
  config = make_config(shuffle_buffer=7)
  first = take(input_pipeline.get_train_data(settings.data(config)), 8)
  assert_batches_equal(first, take(input_pipeline.get_train_data(settings.data(config)), 8))
  assert_batches_equal(first[5:], take(input_pipeline.get_train_data(settings.data(config),
                                                                   start_batch=5), 3))
  other_seed = take(input_pipeline.get_train_data(settings.data(make_config(seed=1))), 1)
  assert not np.array_equal(first[0]['image'], other_seed[0]['image'])


def test_directory_dataset(tmp_path, caplog):
  write_image_folder(str(tmp_path))
  config = make_config(dataset=str(tmp_path), batch=2, batch_eval=4)
  config.pp.randaug.num_layers = 2
  info = input_pipeline.get_dataset_info(settings.data(config))  # Lists files; opens none.
  assert info.class_names == ('class0', 'class1', 'class2')
  assert (info.num_train_examples, info.num_test_examples) == (10, 6)
  with caplog.at_level('WARNING'):
    # 10 positions: every file once.
    epoch = take(input_pipeline.get_train_data(settings.data(config)), 5)
  assert 'Skipped 1 unreadable image file(s)' in caplog.text and 'corrupt.jpg' in caplog.text
  for batch in epoch:
    assert batch['image'].shape == (2, 16, 16, 3) and batch['label'].shape == (2, 3)
    assert -1. <= batch['image'].min() and batch['image'].max() <= 1.
  batches = list(input_pipeline.get_eval_data(settings.data(config)).batches())
  assert len(batches) == 2 and sum(b['mask'].sum() for b in batches) == 6
  labels = np.concatenate([b['label'][b['mask'] > 0].argmax(-1) for b in batches])
  np.testing.assert_array_equal(np.bincount(labels), [2, 2, 2])


def test_two_processes_get_equal_batch_counts(tmp_path):
  write_image_folder(str(tmp_path), test_files=3)  # 9 test images: shares of 5 and 4.
  config = make_config(dataset=str(tmp_path), batch=4, batch_eval=4)  # Local eval batch 2.
  per_process = []
  for index in range(2):
    with mock.patch.object(jax, 'process_count', return_value=2), \
         mock.patch.object(jax, 'process_index', return_value=index):
      eval_data = input_pipeline.get_eval_data(settings.data(config))
      batches = list(eval_data.batches())
      per_process.append((eval_data.num_examples, len(batches),
                          sum(b['mask'].sum() for b in batches)))
      batch = next(input_pipeline.get_train_data(settings.data(config)))
      assert batch['image'].shape == (2, 16, 16, 3)
      assert input_pipeline.get_dataset_info(settings.data(config)).num_test_examples == 9
  assert per_process == [(5, 3, 5.), (4, 3, 4.)]


def test_two_processes_with_tfds(mock_cifar10):
  config = make_config(batch=4, batch_eval=4)
  for index in range(2):
    with mock.patch.object(jax, 'process_count', return_value=2), \
         mock.patch.object(jax, 'process_index', return_value=index):
      batch = next(input_pipeline.get_train_data(settings.data(config)))
      assert batch['image'].shape == (2, 16, 16, 3)
      eval_data = input_pipeline.get_eval_data(settings.data(config))
      assert len(list(eval_data.batches())) == eval_data.num_batches


@pytest.mark.parametrize('overrides, message', [
    (dict(dataset='no_such_dataset_xyz'), 'Unknown dataset'),
    (dict(dataset=''), 'config.dataset is empty'),
    (dict(batch=3), 'config.batch=3 must be a positive multiple'),
    (dict(batch_eval=0), 'config.batch_eval=0 must be a positive multiple'),
    (dict(pp=dict(train='train', test='test', crop=16, train_aug='cutout')), 'train_aug'),
    (dict(pp=dict(train='train', test='test', crop=0)), 'config.pp.crop'),
    (dict(pp=dict(train='train', test='test', crop=16, random_erase=1.5)),
     r'config.pp.random_erase=1.5 must be a probability in \[0, 1\]'),
])
def test_config_errors(mock_cifar10, overrides, message):
  config = make_config()
  config.update(overrides)
  with mock.patch.object(jax, 'process_count', return_value=2):
    with pytest.raises(ValueError, match=message):
      input_pipeline.get_dataset_info(settings.data(config))
      next(input_pipeline.get_train_data(settings.data(config)))
      input_pipeline.get_eval_data(settings.data(config))


def test_bad_directory_layout(tmp_path):
  (tmp_path / 'images').mkdir()
  with pytest.raises(ValueError, match=r'expected .*/train/<class>/\*\.jpg'):
    input_pipeline.get_dataset_info(settings.data(make_config(dataset=str(tmp_path))))
  (tmp_path / 'train' / 'cat').mkdir(parents=True)
  Image.new('RGB', (4, 4)).save(tmp_path / 'train' / 'cat' / 'a.png')
  with pytest.raises(ValueError, match='Missing .*holdout'):
    input_pipeline.get_dataset_info(settings.data(make_config(
        dataset=str(tmp_path), pp=dict(train='train', test='holdout', crop=16))))
  (tmp_path / 'test' / 'dog').mkdir(parents=True)
  with pytest.raises(ValueError, match=r"class folders \['dog'\] that train/ lacks"):
    input_pipeline.get_dataset_info(settings.data(make_config(dataset=str(tmp_path))))


def test_offline_tfds_fails_fast_with_advice(tmp_path, monkeypatch):
  """No mock: a download that cannot connect (a dead local proxy) is one short attempt, then the
  one-line advice (TFDS alone retries for ~3.5 minutes)."""
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    dead = f'http://127.0.0.1:{s.getsockname()[1]}'  # Closed when the block ends: refuses.
  for var in ('HTTPS_PROXY', 'https_proxy', 'HTTP_PROXY', 'http_proxy'):
    monkeypatch.setenv(var, dead)
  for var in ('NO_PROXY', 'no_proxy'):
    monkeypatch.delenv(var, raising=False)
  retries = downloader.MAX_RETRIES
  start = time.monotonic()
  with pytest.raises(ValueError, match='cannot be downloaded: the download failed .*'
                     'tfds_data_dir.*tfds_manual_dir'):
    input_pipeline.get_dataset_info(settings.data(make_config(tfds_data_dir=str(tmp_path))))
  assert time.monotonic() - start < 60
  assert downloader.MAX_RETRIES == retries  # TFDS's own setting again after the attempt.


def test_manual_dataset_needs_manual_dir(tmp_path):
  config = make_config(dataset='imagenet2012', tfds_data_dir=str(tmp_path))
  with pytest.raises(ValueError, match='tfds_manual_dir'):
    input_pipeline.get_dataset_info(settings.data(config))


@pytest.mark.parametrize('op_index', range(len(randaugment.OPS)))
def test_each_randaugment_op_keeps_shape_and_range(op_index):
  image = tf.constant(np.random.default_rng(op_index).uniform(0, 255, (12, 10, 3)), tf.float32)
  for level in (-1., 0.5):
    out = randaugment.OPS[op_index](image, tf.constant(level))
    assert out.shape == (12, 10, 3)
    assert 0. <= float(tf.reduce_min(out)) and float(tf.reduce_max(out)) <= 255.


def _jpeg(shape, exif_orientation=None, **save_args):
  """JPEG bytes of smooth content (chroma upsampling differs at window edges on such images)."""
  y, x = np.mgrid[0:shape[0], 0:shape[1]]
  smooth = (127 + 100 * np.sin(x / 7.) * np.cos(y / 5.)).astype(np.uint8)
  pixels = smooth if len(shape) == 2 else np.stack([smooth, 255 - smooth, smooth // 2], -1)
  image, buffer = Image.fromarray(pixels), io.BytesIO()
  if exif_orientation:
    exif = Image.Exif()
    exif[0x0112] = exif_orientation
    save_args['exif'] = exif.tobytes()
  image.save(buffer, 'JPEG', **save_args)
  return buffer.getvalue()


def test_decode_window_equals_decode_then_crop_exactly():
  """Only the window decoded (upright JPEGs) gives the pixels of the whole image cropped: 4:2:0,
  4:2:2, 4:4:4, grayscale, progressive; EXIF-rotated JPEGs and PNGs take the whole path."""
  png = io.BytesIO()
  pixels = np.random.default_rng(0).integers(0, 256, (20, 30, 3), np.uint8)
  Image.fromarray(pixels).save(png, 'PNG')
  files = [_jpeg((75, 100, 3)), _jpeg((37, 53, 3), subsampling=1),
           _jpeg((41, 50, 3), subsampling=0), _jpeg((51, 34)),
           _jpeg((49, 77, 3), progressive=True), _jpeg((30, 45, 3), exif_orientation=6),
           png.getvalue()]

  @tf.function(autograph=False)  # Traced once: eager conds cost ~0.1 s a call.
  def both(data, seed):
    window = functools.partial(augment.inception_window, seed=seed, area_min=0.05)
    whole = image_ops.decode(data)
    return image_ops.decode_window(data, window), tf.slice(whole, *window(tf.shape(whole)))

  for data in files:
    for s in range(4):
      cropped, expected = both(tf.constant(data), tf.constant([s, 1], tf.int64))
      np.testing.assert_array_equal(cropped, expected)


def test_exif_is_parsed_in_python_only_for_jpegs_that_have_it():
  """The per-image Python call (it takes the GIL from the train loop) is skipped when the head
  holds no EXIF; the orientation is 1 then, as the parse would say."""
  png = io.BytesIO()
  Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(png, 'PNG')
  with mock.patch.object(image_ops, 'jpeg_orientation', wraps=image_ops.jpeg_orientation) as parse:
    assert int(image_ops.exif_orientation(tf.constant(png.getvalue()))) == 1
    assert int(image_ops.exif_orientation(tf.constant(_jpeg((8, 8, 3))))) == 1
    assert parse.call_count == 0
    assert int(image_ops.exif_orientation(tf.constant(_jpeg((8, 8, 3), exif_orientation=8)))) == 8
    assert parse.call_count == 1


def test_records_of_a_block_of_positions_equal_those_of_each_position():
  """The stream's record ids computed a block at a time (across epoch boundaries, and for a
  split smaller than the block) are the per-position ones: the data order is unchanged."""
  seed = tf.constant([3, 2], tf.int64)
  for size, start, count in ((16, 0, 36), (5, 3, 13), (60_000, 59_990, 20), (1, 0, 3)):
    positions = tf.range(start, start + count, dtype=tf.int64)
    block = stream.shuffled_records(positions, size, seed).numpy()
    each = [int(stream.shuffled_record(p, size, seed)) for p in positions]
    np.testing.assert_array_equal(block, each)


def test_uint8_batches_are_the_float_batches_rounded_and_normalised_on_device(mock_cifar10):
  """`pp.uint8_batches`: the train step's normalisation of the uint8 batch is the float batch
  within half a level (the resized crop rounded); the labels are the same."""
  float_config = make_config()
  uint8_config = make_config(pp=dict(train='train', test='test', crop=16, uint8_batches=True))
  assert input_pipeline.device_normalize(settings.data(float_config)) is None
  expected = next(input_pipeline.get_train_data(settings.data(float_config)))
  got = next(input_pipeline.get_train_data(settings.data(uint8_config)))
  assert got['image'].dtype == np.uint8 and expected['image'].dtype == np.float32
  normalised = input_pipeline.device_normalize(settings.data(uint8_config))(got['image'])
  np.testing.assert_allclose(normalised, expected['image'], rtol=0, atol=0.5 / 127.5 + 1e-6)
  assert np.abs(normalised - expected['image']).max() > 0  # Rounded: the check bites.
  np.testing.assert_array_equal(got['label'], expected['label'])


@pytest.fixture
def autograph_conversions(monkeypatch):
  """The functions of this package that AutoGraph converts from now on (their qualnames)."""
  from tensorflow.python.autograph.impl import api as autograph_api  # noqa: PLC0415
  converted, convert = [], autograph_api._convert_actual

  def recording_convert(entity, program_ctx):
    if getattr(entity, '__module__', '').startswith('vit_jax'):
      converted.append(entity.__qualname__)
    return convert(entity, program_ctx)

  monkeypatch.setattr(autograph_api, '_convert_actual', recording_convert)
  return converted


def test_the_pipelines_functions_are_traced_without_autograph(tmp_path, mock_cifar10,
                                                                autograph_conversions):
  """Every function the pipeline maps or filters is graph code, traced as written
  (`sources.as_written`): AutoGraph's rewrite cost ~3 s of a short run's start on 2 vCPUs.
  Folder (checked reads, RandAugment, random erase, Inception crop, eval, the eval locator,
  class counts) and TFDS (shuffle-buffer stream, a process's filtered slice of the stream)."""
  write_image_folder(str(tmp_path / 'folder'))
  folder = make_config(dataset=str(tmp_path / 'folder'), batch=2, batch_eval=4,
                       pp=dict(train='train', test='test', crop=16, train_aug='inception',
                               random_erase=0.5, randaug=dict(num_layers=2, magnitude=9)))
  next(input_pipeline.get_train_data(settings.data(folder)))
  eval_data = input_pipeline.get_eval_data(settings.data(folder))
  assert len(list(eval_data.batches())) == eval_data.num_batches
  assert eval_data.locate(0) is None  # Every file of the first batches decodes.
  assert input_pipeline.class_counts(settings.data(folder), 'test')[1].tolist() == [2, 2, 2]
  with mock.patch.object(jax, 'process_count', return_value=2):
    next(input_pipeline.get_train_data(settings.data(make_config(data_sharding='stream'))))
  next(input_pipeline.get_train_data(settings.data(make_config())))
  assert autograph_conversions == []
