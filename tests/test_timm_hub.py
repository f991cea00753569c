"""timm-format (Hugging Face hub) ViTs: load, logits vs timm, predict, fine-tune, export.

Each family's weights are created by timm itself at tiny sizes (embed 32, depth 2, 2x2 grid),
every parameter noised so zero-initialised parts (LayerScale, heads, registers) matter, and
written as timm writes a hub folder (`timm.models.save_for_hf`).
"""

import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax import checkpoint
from vit_jax.tools import cli
from vit_jax import models
from vit_jax.weights.timm import export as timm_export
from vit_jax.weights import metadata as metadata_lib
from vit_jax.weights import loading
from vit_jax.data import image_ops
from vit_jax import presets

torch = pytest.importorskip('torch')
timm = pytest.importorskip('timm')
from timm.models import save_for_hf  # noqa: E402

TINY = dict(embed_dim=32, depth=2, num_heads=2, num_classes=5)
# family: (timm name as published, extra create_model kwargs, patch size).
FAMILIES = {
    'augreg': ('vit_small_patch16_224.augreg_in21k', {}, 16),
    'deit_distilled': ('deit_small_distilled_patch16_224.fb_in1k', {}, 16),
    'deit3': ('deit3_small_patch16_224.fb_in1k', {}, 16),
    'dinov2': ('vit_small_patch14_dinov2.lvd142m', {}, 14),
    'dinov2_reg4': ('vit_small_patch14_reg4_dinov2.lvd142m', {}, 14),
    'clip': ('vit_base_patch16_clip_quickgelu_224.openai', {}, 16),
    'siglip': ('vit_base_patch16_siglip_224.webli', {}, 16),
    'mae_pooled': ('vit_base_patch16_224.mae', dict(global_pool='avg', fc_norm=True), 16),
}


def timm_model(family: str, seed: int = 0, **overrides):
  """The family's tiny timm model (2x2 patch grid), every parameter noised, in eval mode."""
  name, kwargs, patch = FAMILIES[family]
  torch.manual_seed(seed)
  model = timm.create_model(name, pretrained=False, img_size=2 * patch,
                            **{**TINY, **kwargs, **overrides})
  with torch.no_grad():
    for p in model.parameters():
      p.add_(0.2 * torch.randn_like(p))
  return model.eval()


def save_hub_folder(model, directory) -> str:
  save_for_hf(model, str(directory), safe_serialization=True)
  return str(directory)


def timm_logits(model, images_nhwc: np.ndarray) -> np.ndarray:
  with torch.no_grad():
    return model(torch.from_numpy(images_nhwc.transpose(0, 3, 1, 2).copy())).numpy()


def jax_logits(loaded: loading.LoadedModel, images: np.ndarray, **overrides) -> np.ndarray:
  model = models.get_model(loaded.config, num_classes=loaded.num_classes, **overrides)
  return np.asarray(model.apply({'params': loaded.params}, jnp.asarray(images), train=False))


def _images(size: int, n: int = 2, seed: int = 1) -> np.ndarray:
  return np.random.default_rng(seed).normal(size=(n, size, size, 3)).astype(np.float32)


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_family_logits_match_timm_both_ways(family, tmp_path):
  """Load a timm hub folder: logits equal timm's (float32 noise), far below the GELU gap;
  export it back: timm loads the folder with equal logits."""
  net = timm_model(family)
  folder = save_hub_folder(net, tmp_path / 'hub')
  loaded = loading.load_model(folder)
  size = loaded.image_size
  assert size == 2 * FAMILIES[family][2]
  x = _images(size)
  want = timm_logits(net, x)
  got = jax_logits(loaded, x)
  diff = np.abs(got - want).max()
  other = 'gelu' if loaded.config.activation != 'gelu' else 'gelu_tanh'
  gap = np.abs(jax_logits(loaded, x, activation=other) - want).max()
  assert diff < 2e-5 * max(1., np.abs(want).max()), (diff, family)
  assert gap > 30 * diff, (gap, diff)

  out = timm_export.export(loaded.params, loaded.config.to_dict(), str(tmp_path / 'export'),
                           num_classes=loaded.num_classes, image_size=size,
                           mean=loaded.mean, std=loaded.std)
  with open(os.path.join(out, 'config.json')) as f:
    exported = json.load(f)
  back = timm.create_model(
      exported['architecture'], pretrained=True,
      pretrained_cfg_overlay=dict(file=os.path.join(out, 'model.safetensors'),
                                  num_classes=exported['num_classes']),
      **exported['model_args']).eval()
  np.testing.assert_allclose(timm_logits(back, x), want, rtol=0, atol=1e-5)


def test_bare_safetensors_reads_architecture_from_shapes(tmp_path, caplog):
  """A bare .safetensors file (no config.json): the shapes decide; the rest is logged as
  assumed (head width 64, hence 2 heads of width 128); never called a truncated npz."""
  net = timm_model('deit3', embed_dim=128)
  folder = save_hub_folder(net, tmp_path / 'hub')
  bare = tmp_path / 'bare' / 'weights.safetensors'
  bare.parent.mkdir()
  shutil.copy(os.path.join(folder, 'model.safetensors'), bare)
  loaded = loading.load_model(str(bare))
  assert loaded.config.no_embed_class and loaded.config.layer_scale > 0
  assert any('activation gelu' in a for a in loaded.assumed)
  assert any('num_heads 2' in a for a in loaded.assumed)
  x = _images(32)
  np.testing.assert_allclose(jax_logits(loaded, x), timm_logits(net, x), atol=2e-5)


def test_broken_safetensors_is_not_called_npz(tmp_path):
  path = tmp_path / 'model.safetensors'
  path.write_bytes(b'\x10\x00\x00\x00\x00\x00\x00\x00{"a": 1')
  with pytest.raises(checkpoint.CheckpointError) as e:
    loading.load_model(str(path))
  assert 'safetensors' in str(e.value) and 'truncated or corrupt' not in str(e.value)


def test_hub_name_through_offline_cache(tmp_path, monkeypatch):
  """hf-hub:timm/<name> resolves in a pre-placed huggingface_hub cache with HF_HUB_OFFLINE=1."""
  net = timm_model('dinov2_reg4')
  folder = save_hub_folder(net, tmp_path / 'hub')
  repo = tmp_path / 'hf' / 'hub' / 'models--timm--tiny_dinov2_reg4'
  snapshot = repo / 'snapshots' / ('a' * 40)
  snapshot.mkdir(parents=True)
  for name in ('model.safetensors', 'config.json'):
    shutil.copy(os.path.join(folder, name), snapshot / name)
  (repo / 'refs').mkdir()
  (repo / 'refs' / 'main').write_text('a' * 40)
  monkeypatch.setenv('HF_HOME', str(tmp_path / 'hf'))
  monkeypatch.setenv('HF_HUB_OFFLINE', '1')
  import huggingface_hub.constants
  monkeypatch.setattr(huggingface_hub.constants, 'HF_HUB_CACHE', str(tmp_path / 'hf' / 'hub'))
  monkeypatch.setattr(huggingface_hub.constants, 'HF_HUB_OFFLINE', True)
  loaded = loading.load_model('hf-hub:timm/tiny_dinov2_reg4')
  x = _images(28)
  np.testing.assert_allclose(jax_logits(loaded, x), timm_logits(net, x), atol=2e-5)
  with pytest.raises(checkpoint.CheckpointError, match='hub repository timm/not_cached'):
    loading.load_model('hf-hub:timm/not_cached')


def test_posemb_fitted_to_another_size(tmp_path):
  """A DINOv2 folder at another input size: position embeddings fitted (the model runs)."""
  folder = save_hub_folder(timm_model('dinov2'), tmp_path / 'hub')
  loaded = loading.load_model(folder, image_size=56)
  shape = loaded.params['Transformer']['posembed_input']['pos_embedding'].shape
  assert shape == (1, 1 + 16, 32)
  assert jax_logits(loaded, _images(56)).shape == (2, 5)


@pytest.mark.parametrize('name,kwargs,what', [
    ('eva02_enormous_patch14_clip_224', {}, 'post-norm blocks'),  # EVA's others load (eva).
    ('vit_small_patch16_224', dict(qk_norm=True), 'QK normalisation'),
])
def test_unsupported_models_one_line(name, kwargs, what, tmp_path):
  net = timm.create_model(name, pretrained=False, embed_dim=32, depth=1, num_heads=2,
                          img_size=28 if 'patch14' in name else 32, **kwargs)
  folder = save_hub_folder(net, tmp_path / 'hub')
  with pytest.raises(checkpoint.CheckpointError) as e:
    loading.load_model(folder)
  assert what in str(e.value) and '\n' not in str(e.value), str(e.value)


def test_official_npz_exports_to_timm(tmp_path, capsys):
  """`python -m vit_jax.export_timm` on an official-format npz (tanh GELU, no timm config):
  timm's `local-dir:` loader reads the folder and gives the same logits."""
  from vit_jax.tools import export_timm
  model = models.get_model('testing', num_classes=3)
  x = _images(32)
  params = model.init(jax.random.key(0), jnp.asarray(x), train=False)['params']
  params = jax.tree.map(
      lambda p: p + 0.2 * np.random.default_rng(p.size).normal(size=p.shape).astype(np.float32),
      params)
  want = np.asarray(model.apply({'params': params}, jnp.asarray(x), train=False))
  npz = checkpoint.save(params, str(tmp_path / 'testing.npz'))
  out = str(tmp_path / 'export')
  assert cli.call(export_timm, ['export_timm', f'--checkpoint={npz}', f'--out={out}',
                                '--model=testing', '--image_size=32']) == 0, capsys.readouterr().err
  back = timm.create_model('local-dir:' + out, pretrained=True).eval()  # Reads config.json.
  np.testing.assert_allclose(timm_logits(back, x), want, atol=1e-5)


def test_export_of_what_timm_cannot_hold_is_one_line(tmp_path, capsys):
  from vit_jax.tools import export_timm
  model = models.get_model('testing', num_classes=3, representation_size=10)
  params = model.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)), train=False)['params']
  npz = checkpoint.save(params, str(tmp_path / 'pre_logits.npz'))
  assert cli.call(export_timm, ['export_timm', f'--checkpoint={npz}',
                                f'--out={tmp_path / "x"}']) == 1
  err = capsys.readouterr().err
  assert 'pre_logits' in err and err.count('\n') == 1, err


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_predict_cli_on_a_hub_folder(family, tmp_path, capsys):
  """`python -m vit_jax.predict --checkpoint=<hub folder> IMG`, no --model: the probabilities
  are timm's on the image preprocessed with config.json's size, mean and std."""
  from PIL import Image
  from vit_jax.tools import predict
  net = timm_model(family)
  folder = save_hub_folder(net, tmp_path / 'hub')
  image = tmp_path / 'img.png'
  Image.fromarray(np.random.default_rng(3).integers(0, 256, (40, 48, 3), np.uint8)).save(image)
  rc = cli.call(predict, ['predict', f'--checkpoint={folder}', '--json', '--top_k=5', str(image)])
  out, err = capsys.readouterr()
  assert rc == 0, err
  got = {p['index']: p['probability'] for p in json.loads(out)['results'][0]['predictions']}
  cfg = net.pretrained_cfg
  x = image_ops.preprocess(image_ops.read_image(str(image)), 2 * FAMILIES[family][2],
                          cfg['mean'], cfg['std'])
  want = torch.softmax(torch.from_numpy(timm_logits(net, x[None])), -1).numpy()[0]
  np.testing.assert_allclose([got[i] for i in range(5)], want, atol=1e-5)


def test_finetune_from_a_hub_folder(tmp_path):
  """--config.pretrained_path=<hub folder>, no model: a new zero head, position embeddings
  fitted to the run's resolution, params.npz + metadata.json that predict reads."""
  from test_distributed import write_image_dataset
  from vit_jax import config_lib
  from vit_jax import train
  from vit_jax.training import from_checkpoint
  from vit_jax.training import settings
  folder = save_hub_folder(timm_model('dinov2_reg4'), tmp_path / 'hub')
  config = config_lib.with_dataset(config_lib.get_config(), write_image_dataset(
      str(tmp_path / 'data')))
  config.pp.update(dict(crop=56, train_aug='flip'))
  config.update(dict(pretrained_dir='', pretrained_path=folder, total_steps=2, batch=4,
                     batch_eval=4, accum_steps=1, warmup_steps=1, optim_dtype='float32',
                     eval_every=2, checkpoint_every=2, prefetch=1))
  with_model = from_checkpoint.with_checkpoint_model(settings.read(config)).model_config
  assert with_model.num_registers == 4 and with_model.no_embed_class
  model = models.get_model(with_model, num_classes=3)
  init = model.init(jax.random.key(0), jnp.zeros((1, 56, 56, 3)), train=False)['params']
  loaded = checkpoint.load_pretrained(pretrained_path=folder, init_params=init,
                                      model_config=with_model, grid_shape=(4, 4))
  assert not np.any(loaded['head']['kernel']) and loaded['head']['kernel'].shape == (32, 3)
  assert loaded['Transformer']['posembed_input']['pos_embedding'].shape == (1, 16, 32)
  workdir = str(tmp_path / 'run')
  result = train.train_and_evaluate(config, workdir)
  assert result['step'] == 2 and result['num_examples'] == 9
  with open(os.path.join(workdir, 'metadata.json')) as f:
    assert json.load(f)['model']['num_registers'] == 4
  run = loading.load_model(workdir)
  assert run.image_size == 56 and run.num_classes == 3 and run.config.no_embed_class
  check_run_normalization(workdir, folder, config, tmp_path)


def check_run_normalization(workdir, folder, config, tmp_path):
  """The run trained on the hub folder's mean/std (not x / 127.5 - 1) and says so: eval feeds
  (x / 255 - mean) / std, and metadata.json, the npz's description, predict and the timm
  export all carry the same values."""
  import glob
  from vit_jax.tools import export_timm
  from vit_jax import input_pipeline
  from vit_jax.training import settings
  from vit_jax.training import from_checkpoint
  from vit_jax.training import run_record
  with open(os.path.join(folder, 'config.json')) as f:
    cfg = json.load(f)['pretrained_cfg']
  mean, std = tuple(cfg['mean']), tuple(cfg['std'])
  assert mean != presets.OFFICIAL_MEAN  # DINOv2: ImageNet's.
  normalised = from_checkpoint.with_checkpoint_normalization(
      from_checkpoint.with_checkpoint_model(settings.read(config))).data
  assert (tuple(normalised.mean), tuple(normalised.std)) == (mean, std)
  # Recorded in the run (run.json's `input`): a resume decides the same even when the
  # pretrained folder is gone.
  moved = str(tmp_path / 'moved_away')
  os.rename(folder, moved)
  try:
    resumed = run_record.with_recorded_contributions(settings.read(config),
                                                     run_record.read(workdir)).data
    assert (tuple(resumed.mean), tuple(resumed.std)) == (mean, std)
  finally:
    os.rename(moved, folder)
  eval_data = input_pipeline.get_eval_data(normalised)
  fed = np.concatenate([b['image'] for b in eval_data.dataset.as_numpy_iterator()])
  files = sorted(glob.glob(os.path.join(config.dataset, 'test', '*', '*.png')))
  want = np.stack([image_ops.preprocess(image_ops.read_image(f), 56, mean, std) for f in files])
  for image in fed[:eval_data.num_examples]:  # Each one is some test file, so normalised.
    assert np.abs(want - image).max(axis=(1, 2, 3)).min() < 1e-6
  mine = config.copy_and_resolve_references()
  mine.pp.mean = (0.4, 0.4, 0.4)  # The user's own value wins.
  assert from_checkpoint.with_checkpoint_normalization(
      settings.read(mine)).data.mean == (0.4, 0.4, 0.4)
  with open(os.path.join(workdir, 'metadata.json')) as f:
    preprocessing = json.load(f)['preprocessing']
  assert (tuple(preprocessing['mean']), tuple(preprocessing['std'])) == (mean, std)
  embedded = metadata_lib.embedded_metadata(os.path.join(workdir, 'params.npz'))
  assert tuple(embedded['preprocessing']['mean']) == mean
  run = loading.load_model(workdir)  # What predict and analyze apply to a file.
  assert (run.mean, run.std) == (mean, std)
  out = tmp_path / 'exported'
  assert cli.call(export_timm, ['export_timm', f'--checkpoint={workdir}', f'--out={out}']) == 0
  with open(out / 'config.json') as f:
    exported = json.load(f)['pretrained_cfg']
  assert (tuple(exported['mean']), tuple(exported['std'])) == (mean, std)


@pytest.mark.parametrize('family', ['dinov2_reg4', 'siglip'])
def test_analyze_cli_on_a_hub_folder(family, tmp_path, capsys):
  """analyze on a hub folder: registers (prefix tokens outside the position table) and a
  model without class token both give a full grid of position-embedding similarities."""
  from vit_jax.tools import analyze
  folder = save_hub_folder(timm_model(family), tmp_path / 'hub')
  out = tmp_path / 'out'
  rc = cli.call(analyze, ['analyze', f'--checkpoint={folder}', f'--out={out}', '--image_size=56'
                          if FAMILIES[family][2] == 14 else '--image_size=64'])
  assert rc == 0, capsys.readouterr().err
  result = json.loads((out / 'analysis.json').read_text())
  assert np.array(result['posemb_similarity']).shape == (4, 4, 4, 4)
