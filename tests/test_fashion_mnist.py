"""Offline Fashion-MNIST: idx parsing and TFDS preparation from local gz files (no network)."""

import gzip
import os
import struct
import subprocess
import sys
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import forked
from vit_jax import config_lib
from vit_jax import fashion_mnist as fashion_mnist_command
from vit_jax.data import fashion_mnist
from vit_jax.data import tfds_source
from vit_jax.tools import cli
from vit_jax import input_pipeline
from vit_jax.training import settings

NAMES = ['T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat', 'Sandal', 'Shirt', 'Sneaker',
         'Bag', 'Ankle boot']


def write_idx_gz(path, array):
  """Writes `array` (uint8) as a gzipped idx file, the layout of the original release."""
  header = struct.pack('>BBBB', 0, 0, 0x08, array.ndim)
  header += struct.pack(f'>{array.ndim}I', *array.shape)
  with gzip.open(path, 'wb') as f:
    f.write(header + array.astype(np.uint8).tobytes())


@pytest.fixture
def idx_dir(tmp_path):
  """20 train / 10 test 28x28 images; pixel (0, 0) of image i is i so order can be checked."""
  folder = tmp_path / 'idx'
  folder.mkdir()
  rng = np.random.default_rng(0)
  for split, n in (('train', 20), ('test', 10)):
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    images[:, 0, 0] = np.arange(n)
    image_file, label_file = fashion_mnist.FILENAMES[split]
    write_idx_gz(str(folder / image_file), images)
    write_idx_gz(str(folder / label_file), np.arange(n) % 10)
  return str(folder)


def test_parse_idx_round_trip():
  array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
  data = struct.pack('>BBBBIII', 0, 0, 8, 3, 2, 3, 4) + array.tobytes()
  np.testing.assert_array_equal(fashion_mnist.parse_idx(data), array)
  ints = struct.pack('>BBBBI', 0, 0, 0x0C, 1, 2) + struct.pack('>ii', -1, 70000)
  np.testing.assert_array_equal(fashion_mnist.parse_idx(ints), [-1, 70000])


@pytest.mark.parametrize('data, message', [
    (b'\x01\x02\x08\x01', 'bad magic'),
    (b'\x00\x00\x08\x02\x00\x00', 'truncated'),
    (struct.pack('>BBBBI', 0, 0, 8, 1, 5) + b'abc', 'has 11 bytes'),
])
def test_parse_idx_errors(data, message):
  with pytest.raises(ValueError, match=message):
    fashion_mnist.parse_idx(data)


def test_prepare_matches_tfds_fashion_mnist(idx_dir, tmp_path):
  data_dir = str(tmp_path / 'tfds')
  fashion_mnist.prepare(data_dir, idx_dir)
  builder = tfds.builder('fashion_mnist', data_dir=data_dir)  # TFDS's own, registered builder.
  assert builder.is_prepared()
  assert builder.info.features['image'].shape == (28, 28, 1)
  assert builder.info.features['label'].names == NAMES
  assert {s: builder.info.splits[s].num_examples for s in ('train', 'test')} == dict(
      train=20, test=10)
  assert builder.info.file_format == tfds.core.FileFormat.ARRAY_RECORD  # Random access.
  examples = list(tfds.data_source('fashion_mnist', split='train', data_dir=data_dir))
  assert len(examples) == 20
  assert examples[0]['image'].dtype == np.uint8 and examples[0]['image'].shape == (28, 28, 1)
  by_index = sorted((int(e['image'][0, 0, 0]), int(e['label'])) for e in examples)
  assert by_index == [(i, i % 10) for i in range(20)]
  fashion_mnist.prepare(data_dir, idx_dir)  # Already prepared: a no-op.


def test_missing_files_say_how_to_get_them(tmp_path):
  with mock.patch.dict(os.environ, {fashion_mnist.SOURCE_DIR_ENV: str(tmp_path)}), \
       mock.patch.object(fashion_mnist, 'DEFAULT_SOURCE_DIR', str(tmp_path / 'none')):
    with pytest.raises(ValueError,
                       match='apt-get install dataset-fashion-mnist.*FASHION_MNIST_DIR'):
      fashion_mnist.find_source_dir(None)


def test_input_pipeline_prepares_from_local_files_without_network(idx_dir, tmp_path):
  """Unprepared fashion_mnist with local idx files → prepared from them; no network is tried."""
  config = config_lib.get_config()
  config.update(dict(dataset='fashion_mnist', tfds_data_dir=str(tmp_path / 'tfds'),
                     tfds_manual_dir=idx_dir, batch=4, batch_eval=4, shuffle_buffer=20,
                     prefetch=1))
  config.pp.update(dict(train='train', test='test', crop=28, train_aug='pad_flip'))
  with mock.patch.object(tfds.download.DownloadManager, 'download_and_extract',
                         side_effect=AssertionError('download')):
    info = input_pipeline.get_dataset_info(settings.data(config))
  assert (info.num_train_examples, info.num_test_examples) == (20, 10)
  assert info.class_names == tuple(NAMES)
  batch = next(input_pipeline.get_train_data(settings.data(config)))
  assert batch['image'].shape == (4, 28, 28, 3) and batch['label'].shape == (4, 10)
  assert len(list(input_pipeline.get_eval_data(settings.data(config)).batches())) == 3


def run_command(*args):
  """`python -m vit_jax.fashion_mnist ARGS` in this process (its own flags only, as the tools)."""
  return cli.call(fashion_mnist_command, ['fashion_mnist', *args])


def test_prepare_command(idx_dir, tmp_path, capsys):
  data_dir = str(tmp_path / 'tfds')
  assert run_command(f'--data_dir={data_dir}', f'--source_dir={idx_dir}') == 0
  assert tfds.builder('fashion_mnist', data_dir=data_dir).is_prepared()
  with mock.patch.dict(os.environ, {fashion_mnist.SOURCE_DIR_ENV: ''}), \
       mock.patch.object(fashion_mnist, 'DEFAULT_SOURCE_DIR', str(tmp_path / 'none')):
    assert run_command(f'--data_dir={tmp_path}/other', f'--source_dir={tmp_path}') == 1
  assert 'fashion_mnist: error:' in capsys.readouterr().err


def test_importing_the_input_pipeline_defines_no_global_flags():
  """The command's --data_dir/--source_dir belong to `python -m vit_jax.fashion_mnist`, not to
  every program that imports the input pipeline (main.py, notebooks, the tools)."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  code = ('from absl import flags; import vit_jax.input_pipeline, vit_jax.train; '
          'print(sorted({"data_dir", "source_dir"} & set(flags.FLAGS)))')
  proc = subprocess.run([sys.executable, '-c', code], cwd=root, capture_output=True, text=True,
                        timeout=300)
  assert proc.stdout.strip() == '[]', proc.stderr[-2000:]


def test_command_help_lists_its_flags():
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run([sys.executable, '-m', 'vit_jax.fashion_mnist', '--help'], cwd=root,
                        capture_output=True, text=True, timeout=300)
  # absl's --help prints the main module's key flags (adopted by the shim) and exits 1.
  assert '--data_dir' in proc.stdout and '--source_dir' in proc.stdout, proc.stderr[-2000:]


@pytest.mark.skipif(not os.path.isfile(os.path.join(
    fashion_mnist.DEFAULT_SOURCE_DIR, fashion_mnist.FILENAMES['test'][1])),
                    reason='Debian dataset-fashion-mnist is not installed')
def test_reads_debian_files():
  images, labels = fashion_mnist.load_split(fashion_mnist.DEFAULT_SOURCE_DIR, 'test')
  assert images.shape == (10_000, 28, 28, 1) and images.dtype == np.uint8
  assert labels.shape == (10_000,) and set(np.unique(labels)) == set(range(10))
  # The first test records of the official release: Ankle boot, Pullover, Trouser, Trouser.
  np.testing.assert_array_equal(labels[:4], [9, 2, 1, 1])


def test_array_record_stream_is_indexed_and_resumes_exactly(idx_dir, tmp_path):
  """Prepared as ArrayRecord: every record once per epoch, and resume equals the full run."""
  fashion_mnist.prepare(str(tmp_path / 'tfds'), idx_dir)
  config = config_lib.get_config()
  config.update(dict(dataset='fashion_mnist', tfds_data_dir=str(tmp_path / 'tfds'), batch=4,
                     batch_eval=4, shuffle_buffer=20, prefetch=1,
                     pp=dict(train='train', test='test', crop=28, train_aug='none')))
  it = input_pipeline.get_train_data(settings.data(config))
  stream = [next(it) for _ in range(7)]
  first_pixels = np.concatenate([b['image'][:, 0, 0, 0] for b in stream[:5]])  # One epoch.
  assert sorted(np.round((first_pixels + 1) * 127.5).astype(int)) == list(range(20))
  resumed = input_pipeline.get_train_data(settings.data(config), start_batch=5)
  for expected in stream[5:]:
    np.testing.assert_array_equal(next(resumed)['image'], expected['image'])


def test_array_record_reads_are_what_tfds_deserializes(idx_dir, tmp_path):
  """The serialized records parsed by TF (`tfds_source._fetch`) give TFDS's own examples."""
  fashion_mnist.prepare(str(tmp_path / 'tfds'), idx_dir)
  builder = tfds.builder('fashion_mnist', data_dir=str(tmp_path / 'tfds'))
  ids = [3, 0, 19, 7, 7]
  fetch = tfds_source._fetch(tfds_source._data_source(builder, 'train', 'train'),
                             builder.info.features)
  fetched = fetch(tf.constant(ids, tf.int64))
  expected = builder.as_data_source(split='train', decoders={
      'image': tfds.decode.SkipDecoding()}).__getitems__(ids)
  assert fetched['image'].numpy().tolist() == [r['image'] for r in expected]
  assert fetched['label'].numpy().tolist() == [r['label'] for r in expected]


def test_the_documented_manual_dir_override_works(idx_dir, tmp_path):
  """`--config.tfds_manual_dir=DIR` (the error messages' advice) prepares from DIR and trains."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, JAX_PLATFORMS='cpu', VIT_JAX_HUGEPAGES='0', FASHION_MNIST_DIR='')
  proc = forked.run(
      ['-m', 'vit_jax.main', '--config=configs/resnet_fashion_mnist.py:runlocal',
       f'--config.tfds_manual_dir={idx_dir}', f'--config.tfds_data_dir={tmp_path}/tfds',
       f'--workdir={tmp_path}/run'], cwd=root, env=env, timeout=600)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "'num_examples': 10" in proc.stdout  # The fixture's 10 test images, all evaluated.
