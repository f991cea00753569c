"""Swin Transformer: timm's logits from timm's weights, the shift mask, bias-table resizing,
training (2 steps, exact resume, several devices) and the user's paths (hub folder → predict,
fine-tune).

timm is the reference: its weights (random, plus noise so every parameter matters) are written
by timm itself in its hub-folder format, and its logits computed, in a child process (torch
after TensorFlow crashes the interpreter, see test_timm_interop.py).
"""

import json
import os
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

from vit_jax import checkpoint
from vit_jax import config_lib
from vit_jax.tools import cli
from vit_jax import models
from vit_jax import models_swin
from vit_jax.training import parallel
from vit_jax.tools import predict
from vit_jax.families.swin import timm as swin_timm
from vit_jax.weights.timm import convert as timm_format
from vit_jax import train
from vit_jax.weights import surgery
from vit_jax.weights import npz_format
from vit_jax.weights import loading

# Swin-testing's fields as timm keyword arguments (timm's SwinTransformer accepts them all).
TINY = dict(patch_size=4, embed_dim=16, depths=(2, 2), num_heads=(2, 4), window_size=4)

_TIMM_SCRIPT = r'''
import copy, json, sys
import numpy as np
try:
  import timm
  import torch
  from timm.models import swin_transformer
  from timm.layers import resize_rel_pos_bias_table
  from timm.models._hub import save_for_hf
except ImportError as e:
  print(json.dumps({'import_error': repr(e)}))
  sys.exit(0)
spec = json.loads(sys.argv[1])
torch.set_num_threads(2)
out = spec['out']
if spec.get('tables'):  # timm's resize of random tables: {name: (table, old window, new)}.
  for name, (old, new) in spec['tables'].items():
    table = torch.from_numpy(np.load(f'{out}/{name}.npy'))
    resized = resize_rel_pos_bias_table(table, new_window_size=(new, new),
                                        new_bias_shape=((2 * new - 1)**2, table.shape[1]))
    np.save(f'{out}/{name}_timm.npy', resized.numpy())
  print(json.dumps({}))
  sys.exit(0)
torch.manual_seed(spec['seed'])
model = timm.create_model(spec['name'], pretrained=False, **spec['kwargs']).eval()
gen = torch.Generator().manual_seed(spec['seed'])
with torch.no_grad():  # Noise on every parameter: norms, biases, tables, head all matter.
  for p in model.parameters():
    p.add_(torch.randn(p.shape, generator=gen) * spec['noise'])
save_for_hf(model, out, safe_serialization=True)
x = np.load(f'{out}/images.npy')  # [-1, 1] NHWC, as this repo feeds its models.
mean, std = np.asarray(model.pretrained_cfg['mean']), np.asarray(model.pretrained_cfg['std'])
x = torch.from_numpy((((x + 1) / 2 - mean) / std).astype(np.float32).transpose(0, 3, 1, 2))
facts = {'num_params': sum(p.numel() for p in model.parameters())}
with torch.no_grad():
  np.save(f'{out}/logits.npy', model(x).numpy())
  if spec.get('tanh'):  # The same weights with the tanh GELU: the gap a GELU mix-up would make.
    tanh = copy.deepcopy(model)
    for stage in tanh.layers:
      for block in stage.blocks:
        block.mlp.act = torch.nn.GELU(approximate='tanh')
    np.save(f'{out}/logits_tanh.npy', tanh(x).numpy())
  if spec.get('resized'):  # timm's own loading into another window / resolution.
    other = timm.create_model(spec['name'], pretrained=False, **spec['resized']).eval()
    other.load_state_dict(swin_transformer.checkpoint_filter_fn(model.state_dict(), other))
    size = spec['resized']['img_size']
    y = np.load(f'{out}/images_resized.npy')
    y = torch.from_numpy((((y + 1) / 2 - mean) / std).astype(np.float32).transpose(0, 3, 1, 2))
    np.save(f'{out}/logits_resized.npy', other(y).numpy())
    facts['resized_tables'] = [list(b.attn.relative_position_bias_table.shape)
                               for s in other.layers for b in s.blocks]
print(json.dumps(facts))
'''


def run_timm(spec, out):
  """Runs the timm script with `spec`; returns its facts (skips without timm/torch)."""
  spec = dict(spec, out=str(out))
  run = subprocess.run([sys.executable, '-c', _TIMM_SCRIPT, json.dumps(spec)],
                       capture_output=True, text=True, timeout=600, check=False)
  assert run.returncode == 0, run.stderr[-3000:]
  facts = json.loads(run.stdout.strip().splitlines()[-1])
  if 'import_error' in facts:
    pytest.skip(f'needs timm and torch (pip install .[test]): {facts["import_error"]}')
  return facts


def timm_hub_folder(tmp_path, name, kwargs, images, *, seed=0, noise=0.05, **extra):
  """A hub folder (config.json + model.safetensors) written by timm, and timm's logits."""
  os.makedirs(tmp_path, exist_ok=True)
  np.save(tmp_path / 'images.npy', images)
  facts = run_timm(dict(name=name, kwargs=kwargs, seed=seed, noise=noise, **extra), tmp_path)
  return facts, np.load(tmp_path / 'logits.npy')


def random_images(n, size, seed=0):
  return np.random.default_rng(seed).uniform(-1, 1, (n, size, size, 3)).astype(np.float32)


def convert_folder(folder):
  """The folder through the one timm-format reader: a `timm_files.Converted`."""
  return timm_format.load(str(folder))


def timm_input(x, mean=swin_timm.IMAGENET_MEAN, std=swin_timm.IMAGENET_STD):
  """[-1, 1] images → the tensor timm's script feeds its model ((x01 - mean) / std)."""
  return ((((x + 1) / 2) - np.asarray(mean)) / np.asarray(std)).astype(np.float32)


def apply(model, params, x):
  return np.asarray(jax.jit(lambda p, x: model.apply({'params': p}, x, train=False))(params, x))


@pytest.mark.parametrize('timm_name, preset, size, batch', [
    ('swin_tiny_patch4_window7_224', 'Swin-T_4_7', 224, 2),
    ('swin_base_patch4_window12_384', 'Swin-B_4_12', 384, 1),  # Heavy: one image.
])
def test_logits_equal_timm(tmp_path, timm_name, preset, size, batch):
  x = random_images(batch, size)
  facts, theirs = timm_hub_folder(tmp_path, timm_name, dict(num_classes=10), x, tanh=True)
  converted = convert_folder(tmp_path)
  params, fields = converted.params, converted.model_config
  assert not any('mean' in a for a in converted.assumed)  # config.json has mean/std.
  assert (converted.mean, converted.std) == (swin_timm.IMAGENET_MEAN, swin_timm.IMAGENET_STD)
  assert converted.image_size == size and converted.num_classes == 10
  config = models.get_config(preset)
  assert {k: fields[k] for k in config} == config.to_dict()  # model_name included.
  assert sum(a.size for a in jax.tree.leaves(params)) == facts['num_params']
  # Both sides get the same normalised tensor (the weights carry timm's mean/std, unfolded).
  ours = apply(models.get_model(preset, num_classes=10), params, timm_input(x))
  gap = np.abs(np.load(tmp_path / 'logits_tanh.npy') - theirs).max()
  error = np.abs(ours - theirs).max()
  assert np.abs(theirs).max() > 0.1
  # float32 noise (1.1e-6 and 4.5e-6 seen), far below what a tanh GELU would move (5e-4, 6e-4).
  assert error < 5e-5 and error < gap / 10, (error, gap)


def direct_shift_mask(size, window, shift):
  """For each pair of tokens of each shifted window: 0 if both come from the same region of
  the unshifted map (neither or both wrapped around, per axis), else -100."""
  h, w = size
  # Token (i, j) of the rolled map came from ((i + s) % h, (j + s) % w): it wrapped if i + s >= h.
  wrapped = [[(i + shift[0] >= h, j + shift[1] >= w) for j in range(w)] for i in range(h)]
  n = window[0] * window[1]
  masks = []
  for wi in range(h // window[0]):
    for wj in range(w // window[1]):
      cells = [(wi * window[0] + a, wj * window[1] + b)
               for a in range(window[0]) for b in range(window[1])]
      mask = np.zeros((n, n), np.float32)
      for p, (pi, pj) in enumerate(cells):
        for q, (qi, qj) in enumerate(cells):
          if wrapped[pi][pj] != wrapped[qi][qj]:
            mask[p, q] = models_swin.MASK_VALUE
      masks.append(mask)
  return np.stack(masks)


@pytest.mark.parametrize('size, window, shift', [
    ((8, 8), (4, 4), (2, 2)), ((6, 9), (3, 3), (1, 1)), ((8, 12), (4, 4), (2, 2))])
def test_shift_mask_equals_a_direct_implementation(size, window, shift):
  got = models_swin.shifted_window_mask(size, window, shift)
  np.testing.assert_array_equal(got, direct_shift_mask(size, window, shift))
  # Only the last window row/column mixes regions; the first window attends everywhere.
  assert not got[0].any() and got[-1].any()
  assert models_swin.shifted_window_mask(size, window, (0, 0)) is None


def test_window_clamps_and_stops_shifting_on_small_maps():
  assert models_swin.window_and_shift((56, 56), 7, 3) == ((7, 7), (3, 3))
  assert models_swin.window_and_shift((7, 7), 7, 3) == ((7, 7), (0, 0))  # One window.
  assert models_swin.window_and_shift((4, 12), 7, 3) == ((4, 7), (0, 3))


def test_relative_position_index_by_hand():
  index = models_swin.relative_position_index((2, 2))
  # Tokens (0,0), (0,1), (1,0), (1,1); offsets (dy, dx) + 1 in a 3x3 table, row-major.
  np.testing.assert_array_equal(index, [[4, 3, 1, 0], [5, 4, 2, 1], [7, 6, 4, 3],
                                        [8, 7, 5, 4]])


def test_patch_merging_order_is_timms():
  # One 2x2 neighbourhood holding (row, col) → 4 * row + col: (0,0)=0, (0,1)=1, (1,0)=4,
  # (1,1)=5. timm concatenates (0,0), (1,0), (0,1), (1,1) (the official x0, x1, x2, x3):
  # [0, 4, 1, 5]. An identity reduction and a unit LayerNorm keep the order of the values.
  x = jnp.asarray([[0., 1.], [4., 5.]]).reshape(1, 2, 2, 1)
  params = {'norm': {'scale': jnp.ones(4), 'bias': jnp.zeros(4)},
            'reduction': {'kernel': jnp.eye(4)}}
  out = np.asarray(models_swin.PatchMerging(4).apply({'params': params}, x))[0, 0, 0]
  centred = np.array([0., 4., 1., 5.]) - 2.5
  np.testing.assert_allclose(out, centred / np.sqrt(np.mean(centred**2) + 1e-5), rtol=1e-5)


def test_bias_table_resize_equals_timm(tmp_path):
  rng = np.random.default_rng(0)
  cases = {'up': (7, 12), 'down': (12, 7), 'odd': (4, 6)}
  for name, (old, _) in cases.items():
    np.save(tmp_path / f'{name}.npy', rng.normal(size=((2 * old - 1)**2, 3)).astype(np.float32))
  run_timm(dict(tables=cases), tmp_path)
  for name, (_, new) in cases.items():
    table = np.load(tmp_path / f'{name}.npy')
    got = swin_timm.resize_relative_position_bias_table(table, (new, new))
    assert got.shape == ((2 * new - 1)**2, 3)
    np.testing.assert_allclose(got, np.load(tmp_path / f'{name}_timm.npy'), atol=2e-5)
  same = np.load(tmp_path / 'up.npy')
  assert swin_timm.resize_relative_position_bias_table(same, (7, 7)) is same


@pytest.fixture(scope='module')
def tiny_hub(tmp_path_factory):
  """timm's Swin-testing-shaped hub folder (5 classes, 32px), its logits on 2 images, and
  timm's logits at 48px after loading it into a window-6 model."""
  folder = tmp_path_factory.mktemp('swin_hub')
  x48 = random_images(2, 48, seed=3)
  np.save(folder / 'images_resized.npy', x48)
  x = random_images(2, 32, seed=4)
  facts, logits = timm_hub_folder(
      folder, 'swin_tiny_patch4_window7_224', dict(TINY, img_size=32, num_classes=5), x,
      resized=dict(TINY, img_size=48, window_size=6, num_classes=5))
  return dict(folder=folder, images=x, logits=logits, facts=facts, images_resized=x48,
              logits_resized=np.load(folder / 'logits_resized.npy'))


def test_new_window_at_finetuning_gives_timms_logits(tiny_hub):
  # Weights trained with window 4 at 32px, fine-tuned with window 6 at 48px: timm resizes the
  # tables on loading (checkpoint_filter_fn); we do in `fit_relative_position_tables`.
  x, facts = tiny_hub['images_resized'], tiny_hub['facts']
  params = convert_folder(tiny_hub['folder']).params
  model = models.get_model('Swin-testing', num_classes=5, window_size=6)
  like = jax.eval_shape(lambda: model.init(jax.random.key(0), x, train=False))['params']
  fitted = swin_timm.fit_relative_position_tables(params, like)
  tables = [list(fitted[f'layers_{s}_blocks_{b}']['attn']['relative_position_bias_table'].shape)
            for s in range(2) for b in range(2)]
  assert tables == facts['resized_tables'] == [[121, 2]] * 2 + [[121, 4]] * 2
  surgery.check_tree(fitted, like, 'fitted')
  np.testing.assert_allclose(apply(model, fitted, timm_input(x)), tiny_hub['logits_resized'],
                             atol=5e-5)


def test_official_layout_and_detection():
  model = models.get_model('Swin-testing', num_classes=3)
  shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)),
                                             train=False))['params']
  assert swin_timm.swin_fields(shapes)['depths'] == (2, 2)
  timm_keys = {'patch_embed.proj.weight': (16, 3, 4, 4), 'patch_embed.proj.bias': (16,),
               'layers.0.blocks.0.attn.qkv.weight': (48, 16),
               'layers.0.blocks.0.attn.relative_position_bias_table': (49, 2)}
  sd = {k: np.zeros(s, np.float32) for k, s in timm_keys.items()}
  assert swin_timm.is_swin_state_dict(sd)
  assert swin_timm.is_swin_state_dict({'model': sd})  # The official .pth nesting.
  assert not swin_timm.is_swin_state_dict({'patch_embed.proj.weight': sd[
      'patch_embed.proj.weight'], 'blocks.0.attn.qkv.weight': np.zeros((48, 16))})  # A ViT.
  official = {'layers.0.downsample.reduction.weight': np.zeros((32, 64)),
              'layers.0.blocks.0.attn.relative_position_index': np.zeros((49, 49)),
              'head.weight': np.zeros((3, 32))}
  renamed = swin_timm.timm_layout(official)
  assert set(renamed) == {'layers.1.downsample.reduction.weight', 'head.fc.weight'}
  with pytest.raises(swin_timm.SwinConversionError, match='not a Swin'):
    swin_timm.convert({'patch_embed.proj.weight': np.zeros((16, 3, 4, 4))})


def test_hub_folder_predicts_with_no_model_flag(tmp_path, tiny_hub, capsys, monkeypatch):
  """The user's path: `predict --checkpoint=<timm hub folder>` reads the model from the file."""
  x, theirs = tiny_hub['images'], tiny_hub['logits']
  loaded = loading.load_model(str(tiny_hub['folder']))
  assert loaded.config.model_name == 'Swin-testing' and loaded.num_classes == 5
  assert loaded.image_size == 32
  assert (loaded.mean, loaded.std) == (swin_timm.IMAGENET_MEAN, swin_timm.IMAGENET_STD)
  np.testing.assert_allclose(apply(loaded.model, loaded.params, timm_input(x)), theirs,
                             atol=5e-5)
  # The command line: `python -m vit_jax.predict --checkpoint=FOLDER image.png`, top class
  # = the argmax of the model on the PNG's 8-bit pixels.
  pixels = np.round((x[0] + 1) * 127.5)
  Image.fromarray(pixels.astype(np.uint8)).save(tmp_path / 'image.png')
  assert cli.call(predict, ['predict', f'--checkpoint={tiny_hub["folder"]}', '--json',
                            str(tmp_path / 'image.png')]) == 0
  result = json.loads(capsys.readouterr().out)['results'][0]
  quantised = loaded.model.apply({'params': loaded.params}, timm_input(pixels / 127.5 - 1)[None],
                                 train=False)
  assert result['predictions'][0]['index'] == int(np.argmax(quantised))
  # A bare .safetensors file (no config.json beside it): ImageNet mean/std are assumed, as
  # timm's Swin configs have them.
  bare = tmp_path / 'bare'
  bare.mkdir()
  os.link(tiny_hub['folder'] / 'model.safetensors', bare / 'weights.safetensors')
  loaded = loading.load_model(str(bare / 'weights.safetensors'))
  assert any('timm\'s Swin default' in a for a in loaded.assumed)
  np.testing.assert_allclose(apply(loaded.model, loaded.params, timm_input(x)), theirs,
                             atol=5e-5)
  # And a hub name, through huggingface_hub's cache with networking off.
  _place_in_hub_cache(tmp_path / 'hf', 'tiny_swin', tiny_hub['folder'], monkeypatch)
  loaded = loading.load_model('hf-hub:timm/tiny_swin')
  assert loaded.config.model_name == 'Swin-testing'
  np.testing.assert_allclose(apply(loaded.model, loaded.params, timm_input(x)), theirs,
                             atol=5e-5)


def _place_in_hub_cache(home, name, folder, monkeypatch):
  """`folder`'s files as huggingface_hub's cached timm/<name>, offline mode on."""
  import huggingface_hub.constants
  repo = home / 'hub' / f'models--timm--{name}'
  snapshot = repo / 'snapshots' / ('a' * 40)
  snapshot.mkdir(parents=True)
  for filename in ('model.safetensors', 'config.json'):
    shutil.copy(folder / filename, snapshot / filename)
  (repo / 'refs').mkdir()
  (repo / 'refs' / 'main').write_text('a' * 40)
  monkeypatch.setenv('HF_HOME', str(home))
  monkeypatch.setenv('HF_HUB_OFFLINE', '1')
  monkeypatch.setattr(huggingface_hub.constants, 'HF_HUB_CACHE', str(home / 'hub'))
  monkeypatch.setattr(huggingface_hub.constants, 'HF_HUB_OFFLINE', True)


def test_not_a_swin_safetensors_is_one_clear_line(tmp_path):
  from safetensors.numpy import save_file
  save_file({'blocks.0.attn.qkv.weight': np.zeros((6, 2), np.float32)},
            str(tmp_path / 'model.safetensors'))
  with pytest.raises(checkpoint.CheckpointError, match='is not supported: it needs parameters'):
    loading.load_model(str(tmp_path))
  (tmp_path / 'cut.safetensors').write_bytes(b'\x10\x00\x00')
  with pytest.raises(checkpoint.CheckpointError, match='not a readable safetensors'):
    loading.load_model(str(tmp_path / 'cut.safetensors'))
  # Swin v1 has its converter; Swin v2 (no bias table, a position MLP) is named as missing.
  reason = timm_format.unsupported_reason(
      {'layers.0.blocks.0.attn.cpb_mlp.0.weight': None, 'layers.0.blocks.0.attn.logit_scale':
       None}, {'architecture': 'swinv2_tiny_window8_256'})
  assert 'it needs Swin v2 attention' in reason and 'Swin Transformer v1' in reason, reason


def make_config(**overrides):
  """Swin-testing on mock CIFAR-10 at 32px (2x2 windows of 4 + shift, then one window)."""
  config = config_lib.with_model(config_lib.get_config(), 'Swin-testing')
  config.dataset = 'cifar10'
  config.pp.update(dict(train='train', test='test', crop=32, train_aug='flip'))
  config.update(dict(
      pretrained_dir='', total_steps=2, batch=4, batch_eval=4, accum_steps=1, warmup_steps=1,
      base_lr=0.1, optim_dtype='float32', shuffle_buffer=16, progress_every=1, eval_every=2,
      checkpoint_every=2, prefetch=1))
  config.update(overrides)
  return config



def test_two_step_training_run_and_its_export_predicts(tmp_path, mock_cifar10):
  workdir = tmp_path / 'run'
  result = train.train_and_evaluate(make_config(), str(workdir))
  assert result['step'] == 2 and result['num_examples'] == 10
  assert np.isfinite(result['loss'])
  loaded = loading.load_model(str(workdir))  # No --model: the run's metadata + shapes.
  assert loaded.config.model_name == 'Swin-testing' and loaded.image_size == 32
  init = checkpoint.load(str(workdir / 'params.npz'))
  assert init['head']['kernel'].any()  # The zero-init head trained.


def test_killed_run_resumes_to_identical_params(tmp_path, mock_cifar10):
  from test_train import killed_and_straight  # The ViT's kill-and-resume harness.
  config = make_config(total_steps=4, checkpoint_every=2, eval_every=0, stochastic_depth=0.)
  config.model.stochastic_depth = 0.5  # Drop path draws from the per-step rng.
  workdir, straight = killed_and_straight(config, tmp_path, 4)
  a = npz_format.flatten(checkpoint.load(os.path.join(workdir, 'params.npz')))
  b = npz_format.flatten(checkpoint.load(os.path.join(straight, 'params.npz')))
  assert a.keys() == b.keys()
  for key in a:
    np.testing.assert_array_equal(a[key], b[key], err_msg=key)  # Bit-identical.


def test_same_step_on_1_and_4_devices():
  from test_distributed import run_steps, step_config  # The ViT's multi-device harness.
  config = step_config()
  config.model = make_config().model
  config.model.stochastic_depth = 0.
  batch = {'image': random_images(8, 32), 'label': np.eye(10, dtype=np.float32)[np.arange(8)]}
  reference, _ = run_steps(1, config, batch)
  params, _ = run_steps(4, config, batch)
  for a, b in zip(jax.tree.leaves(reference), jax.tree.leaves(params)):
    np.testing.assert_allclose(a, b, atol=2e-6, rtol=1e-5)
  assert len(jax.devices()) == 4 and parallel.make_mesh().size == 4


def test_finetune_from_a_timm_hub_folder(tmp_path, mock_cifar10, tiny_hub):
  """`--config.pretrained_path=<hub folder>`: timm's weights start the run, with a new head."""
  folder = tiny_hub['folder']
  converted = convert_folder(folder).params
  workdir = tmp_path / 'run'
  config = make_config(pretrained_path=str(folder), base_lr=0., weight_decay=0., optim='adamw')
  train.train_and_evaluate(config, str(workdir))
  # Trained on timm's ImageNet normalisation (config.json's), and the run says so to predict.
  run = loading.load_model(str(workdir))
  assert (run.mean, run.std) == (swin_timm.IMAGENET_MEAN, swin_timm.IMAGENET_STD)
  params = checkpoint.load(str(workdir / 'params.npz'))
  assert params['head']['kernel'].shape == (32, 10)  # CIFAR-10's new head (zero-init).
  del converted['head']
  for key, value in npz_format.flatten(converted).items():  # lr 0: the loaded weights stay.
    np.testing.assert_array_equal(npz_format.flatten(params)[key], value, err_msg=key)
