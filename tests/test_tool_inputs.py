"""What the tools and training read: PyTorch pickles refused, EXIF orientation, 8/16-bit images,
class names in a timm export."""

import json
import os
import pickle

import numpy as np
import pytest

from vit_jax import checkpoint
from vit_jax import config_lib
from vit_jax.training import settings
from vit_jax.tools import cli
from vit_jax.tools import predict


class _Planted:
  """Unpickling this creates `marker`: proof that a file was unpickled."""

  def __init__(self, marker):
    self.marker = marker

  def __reduce__(self):
    return (os.mkdir, (self.marker,))


def _planted_pickle(path, marker):
  with open(path, 'wb') as f:
    pickle.dump({'head.weight': _Planted(str(marker))}, f)
  return str(path)


@pytest.mark.parametrize('layout', ['hub_folder', 'bin_file', 'pth_file', 'pth_in_run_folder'])
def test_a_pytorch_pickle_is_one_line_saying_how_to_convert_and_never_unpickled(
    layout, tmp_path, capsys):
  folder = tmp_path / 'hub'
  folder.mkdir()
  (folder / 'config.json').write_text(json.dumps({'architecture': 'vit_base_patch16_224'}))
  marker = tmp_path / 'unpickled'
  name = 'pytorch_model.bin' if layout in ('hub_folder', 'bin_file') else 'swin_tiny.pth'
  weights = _planted_pickle(folder / name, marker)
  source = str(folder) if layout in ('hub_folder', 'pth_in_run_folder') else weights
  image = tmp_path / 'x.png'
  image.write_bytes(b'')
  assert cli.call(predict, ['predict', f'--checkpoint={source}', str(image)]) == 1
  err = capsys.readouterr().err
  assert err.startswith(f'predict: error: {weights} is a PyTorch pickle: only safetensors'), err
  assert 'save_file(torch.load(' in err and err.count('\n') == 1, err
  config = config_lib.get_config()
  config.pretrained_path = source  # Fine-tuning from it: the same line, before any training.
  with pytest.raises(checkpoint.CheckpointError, match='only safetensors weights are read'):
    settings.read(config).pretrained_location()
  assert not marker.exists()


def _exif_jpeg(pixels, orientation, little_endian):
  """A JPEG of `pixels` whose EXIF (written byte by byte, either byte order) holds
  `orientation`."""
  import io
  import struct
  from PIL import Image
  order = '<' if little_endian else '>'
  tiff = ((b'II' if little_endian else b'MM') + struct.pack(f'{order}HI', 42, 8)
          + struct.pack(f'{order}H', 2)  # Two IFD0 entries: a Software string, then Orientation.
          + struct.pack(f'{order}HHI4s', 0x0131, 2, 4, b'vit\x00')
          + struct.pack(f'{order}HHIHH', 0x0112, 3, 1, orientation, 0)
          + struct.pack(f'{order}I', 0))  # No next IFD.
  buffer = io.BytesIO()
  Image.fromarray(pixels).save(buffer, 'JPEG', quality=95, exif=b'Exif\x00\x00' + tiff)
  return buffer.getvalue()


def _upright_by_pillow(data):
  """The reference: TF's pixels of `data`, turned by Pillow's exif_transpose for its EXIF."""
  import io
  from PIL import Image, ImageOps
  import tensorflow as tf
  with Image.open(io.BytesIO(data)) as original:
    orientation = original.getexif().get(0x0112)
  image = Image.fromarray(tf.io.decode_image(data, channels=3).numpy())
  image.getexif()[0x0112] = orientation
  return np.asarray(ImageOps.exif_transpose(image))


@pytest.mark.parametrize('little_endian', [True, False])
@pytest.mark.parametrize('orientation', range(1, 9))
def test_exif_orientation_is_applied_as_pillow_does(orientation, little_endian):
  import tensorflow as tf
  from vit_jax.data import image_ops
  pixels = np.random.default_rng(orientation).integers(0, 256, (6, 9, 3), dtype=np.uint8)
  data = _exif_jpeg(pixels, orientation, little_endian)
  assert int(image_ops.exif_orientation(tf.constant(data))) == orientation
  np.testing.assert_array_equal(image_ops.decode(tf.constant(data)).numpy(),
                                _upright_by_pillow(data))


def _gradient(h, w):
  """A picture whose top, bottom, left and right all differ (a turn is visible)."""
  ys, xs = np.mgrid[:h, :w]
  return np.stack([ys * 255 // (h - 1), xs * 255 // (w - 1), (ys + xs) * 255 // (h + w - 2)],
                  -1).astype(np.uint8)


def test_exif_orientation_is_the_same_in_training_evaluation_and_predict(tmp_path):
  """A phone portrait (stored landscape, Orientation 6): every path sees it upright."""
  from vit_jax import input_pipeline
  from vit_jax.training import settings
  from vit_jax.data import image_ops
  data = _exif_jpeg(_gradient(12, 20), 6, little_endian=True)
  for split in ('train', 'test'):
    for name in ('cat', 'dog'):
      os.makedirs(tmp_path / split / name)
      (tmp_path / split / name / 'photo.jpg').write_bytes(data)
  config = config_lib.get_config()
  config.update(dict(dataset=str(tmp_path), batch=4, batch_eval=4, prefetch=1,
                     pp=dict(train='train', test='test', crop=8, train_aug='none')))
  path = str(tmp_path / 'test' / 'cat' / 'photo.jpg')
  want = image_ops.preprocess(_upright_by_pillow(data), 8)
  assert image_ops.read_image(path).shape == (20, 12, 3)  # Portrait.
  np.testing.assert_array_equal(image_ops.load_images([path], 8)[0], want)
  batch = next(iter(input_pipeline.get_eval_data(settings.data(config)).batches()))
  evaluated = [image for image, keep in zip(batch['image'], batch['mask']) if keep]
  trained = next(input_pipeline.get_train_data(settings.data(config)))['image']
  assert len(evaluated) == 2 and len(trained) == 4
  for image in (*evaluated, *trained):
    np.testing.assert_allclose(image, want, atol=1e-6)


def test_8_and_16_bit_pngs_and_tiffs_give_the_same_inputs(tmp_path):
  """The same picture as 8-bit PNG, 16-bit PNG (grey and RGB) and 16-bit TIFF: inputs within
  one 8-bit level of x / 65535 in every format, and training reads the PNGs as predict does."""
  import tensorflow as tf
  from PIL import Image
  from vit_jax import input_pipeline
  from vit_jax.training import settings
  from vit_jax.data import image_ops
  grey16 = (_gradient(10, 14)[..., 2].astype(np.uint16) * 257
            + np.random.default_rng(0).integers(0, 257, (10, 14))).astype(np.uint16)
  exact = grey16.astype(np.float64) / 65535 * 255  # In 8-bit units.
  for split in ('train', 'test'):
    for name in ('eight', 'sixteen', 'rgb48'):
      os.makedirs(tmp_path / split / name)
  Image.fromarray(np.round(exact).astype(np.uint8)).save(tmp_path / 'test/eight/a.png')
  Image.fromarray(grey16).save(tmp_path / 'test/sixteen/a.png')
  (tmp_path / 'test/rgb48/a.png').write_bytes(
      tf.io.encode_png(np.repeat(grey16[..., None], 3, -1)).numpy())
  Image.fromarray(grey16).save(tmp_path / 'grey16.tif')
  files = [str(tmp_path / f) for f in ('test/eight/a.png', 'test/sixteen/a.png',
                                       'test/rgb48/a.png', 'grey16.tif')]
  for path in files:
    pixels = image_ops.read_image(path)
    assert pixels.shape == (10, 14, 3) and np.abs(pixels - exact[..., None]).max() <= 1, path
  inputs = image_ops.load_images(files, 8)
  assert np.abs(inputs - inputs[0]).max() <= 2 / 127.5 + 1e-6  # One 8-bit level, either way.
  for split_dir in ('eight', 'sixteen', 'rgb48'):
    for i in range(2):
      Image.fromarray(_gradient(10, 14)).save(tmp_path / 'train' / split_dir / f'{i}.png')
  config = config_lib.get_config()
  config.update(dict(dataset=str(tmp_path), batch=4, batch_eval=4, prefetch=1,
                     pp=dict(train='train', test='test', crop=8)))
  evaluated = next(iter(input_pipeline.get_eval_data(settings.data(config)).batches()))
  by_label = {int(np.argmax(label)): image for image, label, keep in zip(
      evaluated['image'], evaluated['label'], evaluated['mask']) if keep}
  for position, path in enumerate(files[:3]):  # Classes sort as eight, rgb48, sixteen.
    label = ('eight', 'rgb48', 'sixteen').index(path.split(os.sep)[-2])
    np.testing.assert_array_equal(by_label[label], inputs[position])


def test_predict_names_the_classes_of_an_exported_timm_folder(tmp_path, capsys):
  """export_timm writes a run's class names as config.json's `label_names`; predict (and a
  second export) on that folder read them from there, not 'class N'."""
  from test_features import write_checkpoint, write_images
  from vit_jax import models
  from vit_jax.tools import export_timm
  from vit_jax.weights import metadata
  names = ['ant', 'bee', 'cow']
  run = tmp_path / 'run'
  run.mkdir()
  write_checkpoint(run / 'params.npz', num_classes=3)
  metadata.write_metadata(str(run), model_config=models.get_config('testing'), image_size=32,
                          class_names=names, dataset='zoo')
  out, again = tmp_path / 'exported', tmp_path / 'again'
  for source, target in ((run, out), (out, again)):
    assert cli.call(export_timm, ['export_timm', f'--checkpoint={source}',
                                  f'--out={target}']) == 0, capsys.readouterr().err
    assert json.loads((target / 'config.json').read_text())['label_names'] == names
  image = write_images(tmp_path / 'images')[0]
  capsys.readouterr()
  assert cli.call(predict, ['predict', f'--checkpoint={out}', '--json', '--top_k=3', image]) == 0
  got = json.loads(capsys.readouterr().out)['results'][0]['predictions']
  assert sorted(p['label'] for p in got) == names


def test_timm_label_names_are_read_as_timm_writes_them(caplog):
  from vit_jax.weights.timm import files as timm_files
  read = timm_files.declared_label_names
  assert read({'label_names': ['a', 'b']}, 2) == ('a', 'b')
  assert read({'pretrained_cfg': {'label_names': {'1': 'b', '0': 'a'}}}, 2) == ('a', 'b')
  assert read({'label_names': ['n01440764', 'n01443537'], 'label_descriptions': {
      'n01440764': 'tench, Tinca tinca', 'n01443537': 'goldfish, Carassius auratus'}}, 2) == (
          'tench, Tinca tinca', 'goldfish, Carassius auratus')
  assert read({}, 2) is None and read(None, 2) is None and read({'label_names': ['a']}, 0) is None
  with caplog.at_level('WARNING'):
    assert read({'label_names': ['a', 'b', 'c']}, 2) is None
  assert 'not one name per output of the head (2)' in caplog.text
