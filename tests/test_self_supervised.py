"""Self-supervised trainers: MPP's corruption and colour targets, MAE's visible-only encoder, the
loss falling, exact resume, 1 device = 4, and the exported encoder in fine-tuning and the tools."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from test_train import crash_at, final_params, make_config
from vit_jax import checkpoint
from vit_jax import models
from vit_jax import models_masked
from vit_jax import train
from vit_jax.weights import loading
from vit_jax.weights import npz_format
from vit_jax.tools import cli
from vit_jax.tools import features
from vit_jax.training import mae
from vit_jax.training import masked
from vit_jax.training import mpp
from vit_jax.training import optim
from vit_jax.training import parallel
from vit_jax.training import settings


def ssl_config(trainer, **overrides):
  """The `testing` ViT (patch 16) at 64px (4x4 = 16 patches) with a 1-block, width-8 decoder."""
  config = make_config(**dict(dict(trainer=trainer, optim='adamw', base_lr=1e-3), **overrides))
  config.pp.crop = 64
  config.mae.update(dict(decoder_width=8, decoder_depth=1, decoder_heads=2))
  return config


def test_corruption_is_half_the_patches_then_80_10_10():
  kind, source = mpp.corruption_plan(jax.random.key(0), 64, 196, corrupt=0.5, mask=0.8,
                                     random=0.1)
  kind, source = np.asarray(kind), np.asarray(source)
  assert ((kind != models_masked.UNTOUCHED).sum(axis=1) == 98).all()  # Exactly 50% per image.
  chosen = kind[kind != models_masked.UNTOUCHED]
  shares = [np.mean(chosen == k) for k in (models_masked.MASKED, models_masked.RANDOM,
                                           models_masked.KEPT)]
  np.testing.assert_allclose(shares, [0.8, 0.1, 0.1], atol=0.015)  # 6272 corrupted patches.
  assert (source != np.arange(196)[None]).all()  # A random patch is always another one.
  assert ((source >= 0) & (source < 196)).all()


def test_corrupt_embeddings_applies_each_kind():
  x = jnp.arange(2 * 4 * 3, dtype=jnp.float32).reshape(2, 4, 3)
  token = jnp.full((1, 1, 3), -1.)
  kind = jnp.array([[0, 1, 2, 3], [2, 0, 1, 0]])
  source = jnp.array([[1, 2, 0, 0], [3, 0, 0, 0]])
  out = np.asarray(models_masked.corrupt_embeddings(x, token, kind, source))
  x = np.asarray(x)
  np.testing.assert_array_equal(out[0], [x[0, 0], [-1.] * 3, x[0, 0], x[0, 3]])
  np.testing.assert_array_equal(out[1], [x[1, 3], x[1, 1], [-1.] * 3, x[1, 3]])


def test_3bit_colour_targets_are_exact():
  # A 4x4 image of 2x2 patches: red; grey 0.5; (0.1, 0.3, 0.9); half black, half white.
  image = np.zeros((4, 4, 3), np.float32)
  image[:2, :2] = (1., 0., 0.)
  image[:2, 2:] = 0.5
  image[2:, :2] = (0.1, 0.3, 0.9)
  image[2:, 2:] = [[[0.] * 3, [1.] * 3], [[1.] * 3, [0.] * 3]]
  targets = mpp.colour_targets(jnp.asarray(image[None]), 2, 'mean_color', 3)
  # r * 64 + g * 8 + b with 3-bit levels floor(8 v) clipped to 7.
  assert np.asarray(targets).tolist() == [[7 * 64, 4 * 73, 0 * 64 + 2 * 8 + 7, 4 * 73]]
  # 4x4 downsized (patch 4: each cell one pixel): the pixels' own classes, row-major.
  cells = np.asarray(mpp.colour_targets(jnp.asarray(image[None]), 4, 'color_4x4', 3))
  assert cells.shape == (1, 1, 16)
  assert cells[0, 0, :4].tolist() == [448, 448, 292, 292]
  assert cells[0, 0, 12:].tolist() == [23, 23, 511, 0]
  assert mpp.num_outputs('color_4x4', 3, 4) == 16 * 512


def _init(model, crop=64):
  return model.init(jax.random.key(0), jnp.zeros((2, crop, crop, 3)), train=False)['params']


def test_mae_encoder_sees_only_the_visible_tokens():
  config = ssl_config('mae')
  model = masked.get_model(settings.masked(config), config.model)
  params = _init(model)
  keep = mae.visible_patches(jax.random.key(1), 2, 16, 0.75)
  assert keep.shape == (2, 4)
  out, seen = model.apply({'params': params}, jnp.zeros((2, 64, 64, 3)), train=False, keep=keep,
                          capture_intermediates=True)
  # The encoder's blocks ran on the class token + 4 visible patches; the decoder gives all 16.
  block_out = seen['intermediates']['encoder']['Transformer']['encoderblock_0']['__call__'][0]
  assert block_out.shape == (2, 1 + 4, 10)
  assert out.shape == (2, 16, 16 * 16 * 3)
  hidden = np.asarray(mae.masked_positions(keep, 16))
  assert (hidden.sum(axis=1) == 12).all()


@pytest.mark.parametrize('trainer', ['mae', 'mpp'])
def test_encoder_tree_is_the_supervised_vits_without_head(trainer):
  config = ssl_config(trainer)
  supervised = _init(models.get_model(config.model, num_classes=10))
  encoder = _init(masked.get_model(settings.masked(config), config.model))['encoder']
  shapes = lambda tree: {k: v.shape for k, v in npz_format.flatten(tree).items()}  # noqa: E731
  assert shapes(encoder) == {k: v for k, v in shapes(supervised).items()
                             if not k.startswith('head/')}


@pytest.mark.parametrize('trainer', ['mae', 'mpp'])
def test_loss_falls_on_a_fixed_batch(trainer):
  config = ssl_config(trainer, base_lr=3e-3)
  losses = []
  state, step, batch = _fixed_steps(config, parallel.make_mesh())
  for _ in range(20):
    state, metrics = step(state, batch)
    losses.append(float(metrics['loss']))
  assert all(np.isfinite(losses))
  assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5]), losses


def _fixed_steps(config, mesh):
  """Initial state, jitted train step and a fixed batch of smooth random images on `mesh`."""
  model = masked.get_model(settings.masked(config), config.model)
  tx = optim.make_optimizer(settings.optimizer(config), optim.learning_rate_schedule(
      total_steps=30, base_lr=config.base_lr, decay_type='cosine', warmup_steps=2))
  params = _init(model)
  state = parallel.put_replicated({'params': params, 'opt_state': tx.init(params),
                                   'step': jnp.zeros((), jnp.int32),
                                   'rng': jax.random.key_data(jax.random.key(0))}, mesh)
  rng = np.random.default_rng(0)
  # One colour per image: a hidden patch is predictable from the visible ones.
  colours = rng.uniform(-1, 1, (8, 1, 1, 3)).astype(np.float32)
  images = np.broadcast_to(colours, (8, 64, 64, 3)).copy()
  batch = parallel.put_batch({'image': images, 'label': np.eye(10, dtype=np.float32)[
      rng.integers(0, 10, 8)]}, mesh)
  return state, train.make_train_step(model, tx, settings.read(config), mesh), batch


@pytest.mark.parametrize('trainer', ['mae', 'mpp'])
def test_one_device_equals_four(trainer):
  # SGD: Adam turns round-off-sized gradients (attention key biases) into lr-sized steps.
  config = ssl_config(trainer, optim='sgd', base_lr=0.1)
  results = []
  for devices in (1, 4):
    mesh = parallel.make_mesh(jax.devices()[:devices])
    state, step, batch = _fixed_steps(config, mesh)
    for _ in range(2):
      state, _ = step(state, batch)
    results.append(parallel.to_host(state['params']))
  for a, b in zip(jax.tree.leaves(results[0]), jax.tree.leaves(results[1])):
    np.testing.assert_allclose(a, b, atol=2e-6, rtol=1e-5)


def test_fsdp_run_equals_replicated(tmp_path, mock_cifar10):
  runs = {}
  for sharding in ('replicated', 'fsdp'):
    workdir = str(tmp_path / sharding)
    train.train_and_evaluate(ssl_config('mpp', total_steps=2, eval_every=0,
                                        param_sharding=sharding), workdir)
    runs[sharding] = npz_format.flatten(final_params(workdir))
  for key, value in runs['replicated'].items():
    np.testing.assert_allclose(runs['fsdp'][key], value, atol=1e-6, err_msg=key)


def test_killed_mae_run_resumes_to_identical_params(tmp_path, mock_cifar10):
  config = ssl_config('mae', total_steps=6, checkpoint_every=2, eval_every=0)
  train.train_and_evaluate(config, str(tmp_path / 'straight'))
  # The export is the encoder alone, as the checkpoint module reads it (no decoder, no head).
  assert checkpoint.load(str(tmp_path / 'straight' / 'params.npz')).keys() == {
      'embedding', 'cls', 'Transformer'}
  workdir = str(tmp_path / 'killed')
  with crash_at(6), pytest.raises(KeyboardInterrupt):
    train.train_and_evaluate(config, workdir)
  assert sorted(os.listdir(os.path.join(workdir, 'train_state'))) == ['2', '4']
  assert train.train_and_evaluate(config, workdir)['step'] == 6
  np.testing.assert_equal(npz_format.flatten(final_params(workdir)),
                          npz_format.flatten(final_params(str(tmp_path / 'straight'))))


def test_mpp_export_fine_tunes_and_loads_in_the_tools(tmp_path, mock_cifar10, capsys):
  pre = str(tmp_path / 'mpp')
  result = train.train_and_evaluate(ssl_config('mpp', total_steps=2), pre)
  assert 0. <= result['accuracy'] <= 1.  # Colour accuracy on the corrupted test patches.
  params = final_params(pre)
  assert 'head' not in params and 'mask_token' not in params and 'encoder' not in params
  with open(os.path.join(pre, 'metadata.json')) as f:
    meta = json.load(f)
  assert meta['num_classes'] == 0 and meta['self_supervised']['method'] == 'mpp'
  assert meta['self_supervised']['steps'] == 2 and not meta['self_supervised']['labels_used']
  assert 'accuracy' not in meta
  # Fine-tuning at 32px: a new 10-class head, position embeddings fitted from 4x4 to 2x2.
  fine = str(tmp_path / 'fine')
  tuned = train.train_and_evaluate(make_config(total_steps=2, pretrained_path=pre), fine)
  assert tuned['num_examples'] == 10
  assert final_params(fine)['head']['kernel'].shape == (10, 10)
  np.testing.assert_array_equal(final_params(fine)['embedding']['kernel'].shape,
                                params['embedding']['kernel'].shape)
  # Features (no head: the pooled class token), and the timm export.
  loaded = loading.load_model(pre)
  assert loaded.num_classes == 0 and loaded.image_size == 64
  feats = features.extract_features(loaded.model, loaded.params, np.zeros((1, 64, 64, 3)))
  assert feats.logits is None and feats.pre_logits.shape == (1, 10)
  from vit_jax.tools import export_timm
  out = str(tmp_path / 'timm')
  assert cli.call(export_timm, ['export_timm', f'--checkpoint={pre}', f'--out={out}']) == 0, (
      capsys.readouterr().err)
  with open(os.path.join(out, 'config.json')) as f:
    assert json.load(f)['num_classes'] == 0
  from vit_jax.tools import analyze
  assert cli.call(analyze, ['analyze', f'--checkpoint={pre}', f'--out={tmp_path / "an"}']) == 0
  assert json.loads((tmp_path / 'an' / 'analysis.json').read_text())['token_grid'] == [4, 4]
  from PIL import Image
  from vit_jax.tools import predict
  Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(tmp_path / 'x.png')
  capsys.readouterr()
  assert cli.call(predict, ['predict', f'--checkpoint={pre}', str(tmp_path / 'x.png')]) == 1
  err = capsys.readouterr().err
  assert 'no classification head' in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize('change,message', [
    (lambda c: c.model.update(dict(representation_size=10)), 'representation_size=None'),
    (lambda c: c.update(dict(mixup=0.2)), 'no labels'),
    (lambda c: c.update(dict(pretrained_path='x.npz')), 'from scratch'),
    (lambda c: c.mpp.update(dict(target='color_4x4')), 'divisible by 4'),
    (lambda c: c.update(dict(trainer='mae', mae=dict(mask_ratio=1.))), 'must be in'),
    (lambda c: setattr(c, 'model', None), 'needs a model'),
])
def test_settings_the_masked_trainers_cannot_honour_are_one_line(change, message):
  config = ssl_config('mpp')
  config.model.patches.size = (6, 6)
  change(config)
  with pytest.raises(ValueError, match=message):
    validate_masked(config)


def validate_masked(config):
  """`masked.validate` of `config`'s settings, as the trainer calls it."""
  run = settings.read(config)
  masked.validate(run.masked, run.model_config, crop=run.data.crop, mixup=run.mixup,
                  teacher_path=run.distill.teacher_path, pretrained=run.pretrained_location)


@pytest.mark.parametrize('layout', ['flat', 'train'])
def test_a_folder_of_unlabeled_images_pretrains(tmp_path, layout):
  """`DIR/*.png` or `DIR/train/*.png`, no class folders: one class, 2% of it held out for eval."""
  from PIL import Image
  folder = tmp_path / 'images'
  images = folder / 'train' if layout == 'train' else folder
  images.mkdir(parents=True)
  rng = np.random.default_rng(0)
  for i in range(50):
    Image.fromarray(rng.integers(0, 256, (40, 40, 3), np.uint8)).save(images / f'{i}.png')
  config = ssl_config('mae', total_steps=2, dataset=str(folder))
  config.pp.update(dict(train='train', test='test'))
  result = train.train_and_evaluate(config, str(tmp_path / 'run'))
  assert result['step'] == 2 and result['num_examples'] == 1  # train[98%:] of 50 images.
  assert np.isfinite(result['loss'])


@pytest.mark.slow
def test_two_processes_equal_one(tmp_path):
  """MAE: 2 processes x 2 CPU devices = 1 process x 4 (the masks are drawn on the global batch).

  SGD as in test_distributed: Adam would blow the attention key biases' gradients (zero but for
  round-off, softmax is shift-invariant) up to lr-sized steps that differ with the reduction order.
  """
  from test_distributed import CONFIG_FILE, finish, launch, launch_pair, write_image_dataset
  dataset = write_image_dataset(str(tmp_path / 'data'), train_per_class=4, test_per_class=2)
  text = CONFIG_FILE.format(dataset=dataset, steps=3).replace(
      "mixup=0.5))", "mixup=0., trainer='mae'))\n"
      "  config.mae.update(dict(decoder_width=8, decoder_depth=1, decoder_heads=2))")
  assert "trainer='mae'" in text
  (tmp_path / 'config.py').write_text(text)
  single, multi = str(tmp_path / 'single'), str(tmp_path / 'multi')
  finish(launch_pair(str(tmp_path / 'config.py'), multi))
  finish([launch(str(tmp_path / 'config.py'), single, devices=4)])
  one, two = (npz_format.flatten(final_params(d)) for d in (single, multi))
  assert one.keys() == two.keys() and 'head/kernel' not in one
  for key, value in one.items():
    np.testing.assert_allclose(two[key], value, atol=1e-5, err_msg=key)


def test_num_visible_forgives_the_float_error_of_one_minus_the_ratio():
  # 10 * (1 - 0.9) is 0.99999999999999978: MAE's int() alone keeps 0 patches, not 1.
  assert mae.num_visible(10, 0.9) == 1
  assert mae.num_visible(196, 0.75) == 49 and mae.num_visible(16, 0.75) == 4
  assert mae.num_visible(10, 0.7) == 3 and mae.num_visible(100, 0.99) == 1
  assert mae.num_visible(4, 0.8) == 0 and mae.num_visible(10, 0.95) == 0  # Still a floor.


@pytest.mark.parametrize('trainer,setting,message', [
    ('mae', dict(mask_ratio=0.8), r'mae.mask_ratio=0.8 leaves no patch of the 4 \(2x2 at '
     r'pp.crop=32, patch 16\) visible.*mask_ratio=0.75 or lower'),
    ('mae', dict(mask_ratio=1e-8),
     r'mae.mask_ratio=1e-08 hides no patch of the 4 .*empty.*mask_ratio=0.25 or higher'),
    ('mpp', dict(corrupt=0.1), r'mpp.corrupt=0.1 corrupts no patch of the 4 .*empty.*'
     r'corrupt=0.13 or higher'),
    ('mpp', dict(corrupt=0.), r'mpp.corrupt=0.0 must be in \(0, 1\]'),
    ('mpp', dict(mask=0.9, random=0.2), r'mpp.mask \+ mpp.random = 1.1 must be at most 1'),
])
def test_a_mask_with_nothing_visible_or_nothing_to_predict_is_refused_before_step_1(
    tmp_path, mock_cifar10, trainer, setting, message):
  config = ssl_config(trainer, total_steps=2)
  config.pp.crop = 32  # The `testing` ViT's patch 16: 2x2 = 4 patches.
  config[trainer].update(setting)
  with pytest.raises(ValueError, match=message) as raised:
    train.train_and_evaluate(config, str(tmp_path / 'run'))
  assert len(str(raised.value).splitlines()) == 1
  run = tmp_path / 'run'  # Refused before anything ran: no step saved, nothing logged.
  assert not list(run.glob('train_state/*')) and not (run / 'metrics.jsonl').exists()


def test_mpp_keeps_every_token_so_relative_tables_span_the_whole_grid():
  """MPP corrupts embeddings in place: all 16 patches stay at their own grid offsets (MAE's
  visible subset: tests/test_relative_posemb.py)."""
  config = ssl_config('mpp')
  config.model.posemb = 'relative'
  model = masked.get_model(settings.masked(config), config.model)
  params = jax.jit(lambda: _init(model))()
  kind, source = mpp.corruption_plan(jax.random.key(1), 2, 16, corrupt=0.5, mask=0.8, random=0.1)
  x = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (2, 64, 64, 3)), jnp.float32)
  run = jax.jit(lambda p: model.apply({'params': p}, x, train=False, kind=kind, source=source))
  table = params['encoder']['Transformer']['encoderblock_0']['relative_posemb']
  assert table['rel_embedding'].shape == (7, 7, 2, 5)  # 4x4 patches: 7x7 offsets.
  out = run(params)
  assert out.shape == (2, 16, 512) and np.isfinite(out).all()
  moved = jax.tree_util.tree_map_with_path(
      lambda path, v: v + 1. if "'rel_embedding'" in jax.tree_util.keystr(path) else v, params)
  assert np.abs(run(moved) - out).max() > 1e-4  # The tables bias the attention.
