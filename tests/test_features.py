"""Tests for vit_jax.data.image_ops (image reading/preprocessing) and vit_jax.tools.features
(load_model, captured features)."""

import os
import runpy
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from npz_fixtures import perturb
from vit_jax import checkpoint
from vit_jax import config_lib
from vit_jax import input_pipeline
from vit_jax.training import settings
from vit_jax.data import folder_source
from vit_jax.data import image_ops
from vit_jax.tools import cli
from vit_jax.tools import features
from vit_jax import models
from vit_jax.weights import store
from vit_jax.weights import loading


def write_checkpoint(path, *, num_classes=10, image_size=32, zero_head=False, seed=0,
                     model='testing'):
  """Saves perturbed random weights of `model` via checkpoint.save; returns the param tree."""
  net = models.get_model(model, num_classes=num_classes)
  params = net.init(jax.random.key(seed), jnp.zeros((1, image_size, image_size, 3)),
                    train=False)['params']
  params = perturb(params, seed=seed, scale=0.5)
  if zero_head:
    params['head'] = jax.tree.map(np.zeros_like, params['head'])
  checkpoint.save(params, str(path))
  return params


def write_images(folder, seed=0):
  """Images of several sizes, formats and modes; returns their paths (sorted)."""
  os.makedirs(folder, exist_ok=True)
  rng = np.random.default_rng(seed)
  rgb = lambda h, w: rng.integers(0, 256, (h, w, 3), dtype=np.uint8)  # noqa: E731
  files = {
      'a_rgb.png': Image.fromarray(rgb(40, 50)),
      'b_grey.jpg': Image.fromarray(rgb(64, 30)[..., 0], 'L'),
      'c_rgba.png': Image.fromarray(np.concatenate([rgb(33, 33), rgb(33, 33)[..., :1]], -1),
                                    'RGBA'),
      'd_palette.gif': Image.fromarray(rgb(20, 70)).convert('P'),
  }
  for name, image in files.items():
    image.save(os.path.join(folder, name))
  return sorted(os.path.join(folder, name) for name in files)


@pytest.fixture(scope='module')
def saved(tmp_path_factory):
  path = tmp_path_factory.mktemp('ckpt') / 'testing.npz'
  params = write_checkpoint(path)
  return str(path), params


def test_preprocess_is_tf_bilinear_resize_to_minus_one_one():
  image = np.random.default_rng(0).integers(0, 256, (37, 53, 3), dtype=np.uint8)
  out = image_ops.preprocess(image, 32)
  want = (tf.image.resize(image, [32, 32], method='bilinear').numpy() - 127.5) / 127.5
  assert out.shape == (32, 32, 3) and out.dtype == np.float32
  np.testing.assert_allclose(out, want, atol=1e-6)
  assert out.min() >= -1 and out.max() <= 1
  np.testing.assert_allclose(image_ops.preprocess(np.full((5, 5, 3), 255, np.uint8), 8), 1.)


def test_preprocess_with_mean_std_keeps_its_float32_numbers():
  """A timm mean/std: (x / 255 - mean) / std, bit for bit as numpy float32 computes it."""
  image = np.random.default_rng(1).integers(0, 256, (61, 47, 3), dtype=np.uint8)
  mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
  resized = tf.image.resize(image, [57, 57], method='bilinear').numpy().astype(np.float32)
  want = (resized / np.float32(255.) - np.float32(mean)) / np.float32(std)
  np.testing.assert_array_equal(image_ops.preprocess(image, 57, mean, std), want)


def test_read_and_preprocess_match_the_eval_input_pipeline(tmp_path):
  """A folder's test images via `get_eval_data` = `preprocess(read_image(file))`, bit for bit."""
  for split in ('train', 'test'):
    written = write_images(tmp_path / split / 'a')
  paths = written  # Every format, the .gif too: one list of image files for every path.
  config = config_lib.get_config()
  config.update(dict(dataset=str(tmp_path), batch=4, batch_eval=4))
  config.pp.update(dict(train='train', test='test', crop=32))
  batch = next(input_pipeline.get_eval_data(settings.data(config)).batches())
  order, _ = folder_source.folder_split(str(tmp_path), ('a',), 'test')
  want = np.stack([image_ops.preprocess(image_ops.read_image(str(p)), 32) for p in order])
  assert sorted(map(str, order)) == paths and batch['mask'].sum() == len(paths)
  np.testing.assert_array_equal(batch['image'][:len(paths)], want)


def test_read_image_any_mode_gives_uint8_rgb(tmp_path):
  paths = write_images(tmp_path)
  grey16 = tmp_path / 'e_grey16.png'
  Image.fromarray(np.arange(600, dtype=np.uint16).reshape(20, 30) * 100).save(grey16)
  tiff = tmp_path / 'f.tiff'
  Image.fromarray(np.zeros((9, 7, 3), np.uint8)).save(tiff)
  for path in [*paths, str(grey16), str(tiff)]:
    image = image_ops.read_image(path)
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3, path
  grey = image_ops.read_image(paths[1])
  assert grey.shape == (64, 30, 3) and np.all(grey[..., 0] == grey[..., 2])
  # 16-bit values are scaled to 8 bits (65535 → 255), not clipped to one saturated value.
  assert abs(int(image_ops.read_image(str(grey16)).max()) - 59900 / 257) <= 1


def test_read_image_errors(tmp_path):
  with pytest.raises(image_ops.ImageError, match='Could not find image'):
    image_ops.read_image(str(tmp_path / 'missing.jpg'))
  bad = tmp_path / 'notes.txt'
  bad.write_text('not an image')
  with pytest.raises(image_ops.ImageError, match='Could not read image'):
    image_ops.read_image(str(bad))
  assert issubclass(image_ops.ImageError, ValueError)


def test_load_model_reads_classes_and_size(saved):
  path, params = saved
  loaded = loading.load_model(path, 'testing')
  assert (loaded.num_classes, loaded.image_size, loaded.head_is_zero) == (10, 32, False)
  np.testing.assert_array_equal(loaded.params['head']['kernel'], params['head']['kernel'])


def test_load_model_resizes_posemb_for_other_size(saved):
  loaded = loading.load_model(saved[0], 'testing', image_size=64)
  assert loaded.params['Transformer']['posembed_input']['pos_embedding'].shape == (1, 17, 10)
  out = loaded.model.apply({'params': loaded.params}, np.zeros((1, 64, 64, 3)), train=False)
  assert out.shape == (1, 10)


def test_load_model_errors(saved, tmp_path):
  with pytest.raises(checkpoint.CheckpointError, match='--model') as e:
    loading.load_model(saved[0], 'ViT-Ti_16')
  assert len(str(e.value)) < 300 and 'hidden size 10 in the file, 192 in ViT-Ti_16' in str(e.value)
  with pytest.raises(ValueError, match='Unknown model'):
    loading.load_model(saved[0], 'ViT-Q_99')
  with pytest.raises(checkpoint.CheckpointError, match='Could not find checkpoint'):
    loading.load_model(str(tmp_path / 'nope.npz'), 'testing')


def test_load_model_without_model_reads_the_file(saved, tmp_path):
  path, params = saved
  anonymous = tmp_path / 'x.npz'
  anonymous.write_bytes(open(path, 'rb').read())
  loaded = loading.load_model(str(anonymous))
  assert loaded.config.model_name == 'testing' and loaded.image_size == 32
  np.testing.assert_array_equal(loaded.params['head']['kernel'], params['head']['kernel'])


def test_checkpoint_names_resolve(tmp_path):
  assert store.locate('ViT-B_16').path == (
      'gs://vit_models/imagenet21k+imagenet2012/ViT-B_16.npz')
  assert store.locate('imagenet21k/ViT-L_16').path == (
      'gs://vit_models/imagenet21k/ViT-L_16.npz')
  assert store.locate('augreg/S_16-i21k-300ep').path == (
      'gs://vit_models/augreg/S_16-i21k-300ep.npz')
  (tmp_path / 'params.npz').write_bytes(b'')
  assert store.locate(str(tmp_path)).path == str(tmp_path / 'params.npz')
  (tmp_path / 'empty_run').mkdir()
  with pytest.raises(checkpoint.CheckpointError, match='has no params.npz'):
    store.locate(str(tmp_path / 'empty_run'))


def test_features_come_from_the_same_forward_pass(saved):
  loaded = loading.load_model(saved[0], 'testing')
  x = np.random.default_rng(0).uniform(-1, 1, (3, 32, 32, 3)).astype(np.float32)
  f = features.extract_features(loaded.model, loaded.params, x)
  plain = loaded.model.apply({'params': loaded.params}, x, train=False)
  np.testing.assert_allclose(f.logits, plain, rtol=1e-5, atol=1e-6)
  assert f.tokens.shape == (3, 5, 10) and len(f.blocks) == len(f.attention) == 1
  assert f.attention[0].shape == (3, 2, 5, 5)
  np.testing.assert_allclose(f.attention[0].sum(-1), 1., atol=1e-5)
  # Token classifier without representation layer: the embedding is the encoder's class token.
  np.testing.assert_allclose(f.pre_logits, f.tokens[:, 0], atol=1e-6)
  norm = loaded.params['Transformer']['encoder_norm']
  block = np.asarray(f.blocks[-1])
  normed = (block - block.mean(-1, keepdims=True)) / np.sqrt(block.var(-1, keepdims=True) + 1e-6)
  np.testing.assert_allclose(normed * norm['scale'] + norm['bias'], f.tokens, atol=1e-4)


def test_attention_weights_match_a_manual_computation(saved):
  loaded = loading.load_model(saved[0], 'testing')
  x = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
  f = features.extract_features(loaded.model, loaded.params, x)
  p = loaded.params
  tokens = jax.lax.conv_general_dilated(
      x, p['embedding']['kernel'], (16, 16), 'VALID',
      dimension_numbers=('NHWC', 'HWIO', 'NHWC')) + p['embedding']['bias']
  tokens = np.asarray(tokens).reshape(2, 4, 10)
  tokens = np.concatenate([np.broadcast_to(p['cls'], (2, 1, 10)), tokens], 1)
  tokens = tokens + p['Transformer']['posembed_input']['pos_embedding']
  blk = p['Transformer']['encoderblock_0']
  ln = blk['LayerNorm_0']
  y = (tokens - tokens.mean(-1, keepdims=True)) / np.sqrt(tokens.var(-1, keepdims=True) + 1e-6)
  y = y * ln['scale'] + ln['bias']
  att = blk['MultiHeadDotProductAttention_0']
  q = np.einsum('bnd,dhk->bhnk', y, att['query']['kernel']) + att['query']['bias'][:, None]
  k = np.einsum('bnd,dhk->bhnk', y, att['key']['kernel']) + att['key']['bias'][:, None]
  want = jax.nn.softmax(np.einsum('bhqk,bhnk->bhqn', q, k) / np.sqrt(5), axis=-1)
  np.testing.assert_allclose(f.attention[0], want, atol=1e-5)


def test_make_feature_fn_rejects_mixer():
  with pytest.raises(ValueError, match='Vision Transformer'):
    features.make_feature_fn(models.get_model('Mixer-B_16', num_classes=2))


README_SNIPPET_BEFORE_LAYERS = """\
from vit_jax import features
m = features.load_model('ViT-B_16')
images = features.load_images(['cat.jpg'], m.image_size)
logits = m.model.apply({'params': m.params}, images, train=False)
"""


def readme_python_snippet():
  with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), 'README.md')) as f:
    text = f.read()
  return text.split('```python\n', 1)[1].split('```', 1)[0]


@pytest.mark.parametrize('snippet', ['readme', 'before_layers'])
def test_readme_python_snippet_runs_and_so_does_its_old_spelling(saved, tmp_path, snippet):
  """The README's snippet as printed (ViT-B_16 → a small npz, cat.jpg → a written image), and
  the spelling from before vit_jax had subpackages (`vit_jax.features`), give the same logits."""
  code = readme_python_snippet() if snippet == 'readme' else README_SNIPPET_BEFORE_LAYERS
  assert "load_model('ViT-B_16')" in code and "'cat.jpg'" in code
  image = write_images(tmp_path)[0]
  code = code.replace("'ViT-B_16'", repr(saved[0])).replace("'cat.jpg'", repr(image))
  scope = {}
  exec(compile(code, 'README.md', 'exec'), scope)  # noqa: S102
  loaded = loading.load_model(saved[0])
  expected = loaded.model.apply({'params': loaded.params},
                                image_ops.load_images([image], loaded.image_size), train=False)
  np.testing.assert_allclose(scope['logits'], expected, rtol=1e-6, atol=1e-6)


def test_features_command_writes_what_extract_features_gives(saved, tmp_path, capsys):
  """`python -m vit_jax.features --checkpoint=... --out=f.npz IMAGES`: per image its path,
  pre-logits and logits (and with --tokens the encoder's tokens), as `extract_features` on
  the images preprocessed as predict does."""
  images = write_images(tmp_path / 'images')
  out = tmp_path / 'f.npz'
  rc = cli.call(features, ['features', f'--checkpoint={saved[0]}', f'--out={out}', '--tokens',
                           '--batch_size=3', str(tmp_path / 'images')])
  stdout, err = capsys.readouterr()
  assert rc == 0, err
  assert str(out) in stdout and len(stdout.strip().splitlines()) == 1
  loaded = loading.load_model(saved[0])
  want = features.extract_features(loaded.model, loaded.params,
                                   image_ops.load_images(images, loaded.image_size))
  with np.load(out) as got:
    assert list(got['image']) == images
    for name in ('pre_logits', 'logits', 'tokens'):  # Batches of 3 vs all 4: XLA sums in
      # another order (seen: 2.2e-6 on a token of 0.03 on one machine, float32 round-off).
      np.testing.assert_allclose(got[name], getattr(want, name), rtol=1e-5, atol=1e-5)
  assert cli.call(features, ['features', f'--checkpoint={saved[0]}', str(images[0])]) == 1
  assert capsys.readouterr().err.startswith('features: error: Pass --checkpoint')


@pytest.mark.parametrize('module', ['vit_jax.features', 'vit_jax.tools.features'])
def test_features_command_has_help(module):
  done = subprocess.run([sys.executable, '-m', module, '--help'], capture_output=True, text=True,
                        timeout=300, env=dict(os.environ, JAX_PLATFORMS='cpu'))
  assert done.returncode == 0, done.stderr[-2000:]
  for text in ('--checkpoint', '--out', '--tokens', 'pre_logits'):
    assert text in done.stdout, done.stdout


def test_inference_time_module_says_in_one_line_how_to_run_it(capsys):
  """As officially, inference_time is the trainer `main.py` runs (no command of its own)."""
  with pytest.raises(SystemExit) as done:
    runpy.run_module('vit_jax.inference_time', run_name='__main__')
  out, err = capsys.readouterr()
  assert done.value.code == 2 and out == '' and len(err.strip().splitlines()) == 1
  assert 'python -m vit_jax.main --config=configs/inference_time.py' in err
