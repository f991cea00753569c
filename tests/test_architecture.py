"""architecture.architecture: every preset and non-preset shape recovered from an anonymous file.

Big presets are checked on shapes only (`jax.eval_shape`, arrays broadcast from one zero, no
memory); small models are written with random weights as `x.npz` (a name that says nothing),
read back and run: the tools without `--model` give the preset path's logits.
"""

import json

import jax
import numpy as np
import pytest

from npz_fixtures import BLOCK_NAMES, images, perturb, published_vit, write_npz
from test_features import write_images
from vit_jax.tools import analyze
from vit_jax.tools import cli
from vit_jax import checkpoint
from vit_jax import config_lib
from vit_jax import models
from vit_jax.tools import predict
from vit_jax import presets
from vit_jax.weights import surgery
from vit_jax.weights import npz_format
from vit_jax.weights import metadata as metadata_lib
from vit_jax.weights import loading
from vit_jax.weights import architecture
from vit_jax.training import settings


def _abstract(config, size, num_classes):
  model = models.get_model(config, num_classes=num_classes)
  return jax.eval_shape(lambda: model.init(
      jax.random.key(0), np.zeros((1, size, size, 3), np.float32), train=False))['params']


def _comparable(config):
  """Plain dict with VIT_EXTRAS filled in and `resnet` present (None when not a hybrid)."""
  out = architecture.plain_config(config)
  if presets.family_of(out) != 'mixer':
    out = {**presets.VIT_EXTRAS, 'resnet': None, **out}
  return out


def _same(found, config, ignore_name=False):
  have, want = _comparable(found), _comparable(config)
  if ignore_name:
    have.pop('model_name'), want.pop('model_name')
  assert have == want


@pytest.mark.parametrize('name', list(models.MODEL_CONFIGS))
def test_every_preset_from_shapes(name):
  config = models.MODEL_CONFIGS[name]
  if presets.family_of(config) != 'mixer':
    config = config_lib.with_model(config_lib.get_config(), name).model
  size = 64 if 'testing' in name else 224
  shapes = _abstract(config, size, 1000)
  flat = npz_format.params_to_flat(
      jax.tree.map(lambda s: np.broadcast_to(np.float32(0), s.shape), shapes))
  arch = architecture.architecture(flat)
  assert arch.model_name == name
  _same(arch.config, config)
  # A ResNet classifier has no position embeddings, so no trained resolution to read.
  resnet, swin = (presets.family_of(config) == f for f in ('resnet', 'swin'))
  # A Swin has none either: its published resolution (last stage one window) is assumed.
  # Nor a ViT without a position table (DINOv3's: rotary only, any grid).
  free = resnet or 'posembed_input' not in shapes.get('Transformer', {'posembed_input': 0})
  image_size = None if free else presets.finetune_resolution(config) if swin else size
  assert (arch.num_classes, arch.image_size) == (1000, image_size)
  assert arch.grid == (None if free or swin else models.token_grid(config, (size, size)))
  assert not swin or any('trained at' in note for note in arch.assumed)
  # A Linen tree (here: shapes only) gives the same answer as the published flat names.
  assert architecture.architecture(shapes) == arch


def _vit(name, patch=8, resnet_layers=None, **fields):
  config = config_lib.small_vit(name, patch=patch, hidden=16, layers=2, mlp=24, heads=2,
                                resnet_layers=resnet_layers)
  config.update(fields)
  return config


def _fmnist(path):
  return loading.model_config(path)


NON_PRESETS = {
    'quickstart': (lambda: _fmnist('configs/fashion_mnist_quickstart.py'), 28),
    'full-hybrid': (lambda: _fmnist('configs/fashion_mnist_full.py'), 56),
    'gap': (lambda: _vit('g', classifier='gap'), 32),
    'pre_logits': (lambda: _vit('p', representation_size=12), 32),
    'learn_2d': (lambda: _vit('l2', posemb='learn_2d'), 48),
    'sincos2d': (lambda: _vit('s', posemb='sincos2d'), 32),
    'hybrid-stage': (lambda: _vit('h', patch=1, resnet_layers=(1, 2)), 64),
}


@pytest.mark.parametrize('case', list(NON_PRESETS))
def test_non_preset_shapes_from_an_anonymous_file(case, tmp_path):
  make, size = NON_PRESETS[case]
  config = make()
  config.attention_impl = 'xla'  # Not in the file; the default is what comes back.
  model = models.get_model(config, num_classes=7)
  params = perturb(model.init(jax.random.key(0), images(1, size, size), train=False)['params'])
  path = checkpoint.save(params, str(tmp_path / 'x.npz'))
  arch = architecture.architecture(npz_format.read_npz(path))
  assert arch.model_name != config.model_name and 'custom' in arch.model_name
  _same(arch.config, config, ignore_name=True)
  assert arch.num_classes == 7 and arch.image_size == (None if case == 'sincos2d' else size)
  assert any('dropout_rate' in a for a in arch.assumed)
  assert any('sincos2d' in a for a in arch.assumed) == (case == 'sincos2d')
  x = images(2, size, size, seed=1)
  rebuilt = models.get_model(arch.config, num_classes=arch.num_classes)
  np.testing.assert_array_equal(rebuilt.apply({'params': checkpoint.load(path)}, x, train=False),
                                model.apply({'params': params}, x, train=False))


@pytest.mark.parametrize('linen_names', [False, True])
def test_hand_written_published_files(linen_names, tmp_path):
  """Files spelled out by hand (npz_fixtures): pre-Linen or Linen names, (1,1,1,C) GroupNorm."""
  flat, _ = published_vit(hidden=12, mlp=20, heads=3, layers=2, patch=4, num_tokens=1 + 9,
                          num_classes=6, representation_size=8, root_width=32)
  if linen_names:
    renames = dict(BLOCK_NAMES)
    flat = {'/'.join(renames.get(p, p) for p in k.split('/')): v for k, v in flat.items()}
  arch = architecture.architecture(npz_format.read_npz(write_npz(tmp_path / 'model.npz', flat)))
  c = arch.config
  assert (c.patches.size, c.hidden_size, c.representation_size) == ((4, 4), 12, 8)
  assert (c.transformer.num_layers, c.transformer.num_heads, c.transformer.mlp_dim) == (2, 3, 20)
  assert c.resnet.to_dict() == {'num_layers': (), 'width_factor': 0.5}
  assert (arch.num_classes, arch.grid, arch.image_size) == (6, (3, 3), 48)  # 3 x 4 x 4px.
  assert c.model_name == 'R+ViT-custom-12d-2L-3h-mlp20-p4'


def _write(model_name_or_config, size, path, num_classes=10, seed=0):
  model = models.get_model(model_name_or_config, num_classes=num_classes)
  params = perturb(model.init(jax.random.key(seed), images(1, size, size), train=False)['params'],
                   seed=seed)
  return checkpoint.save(params, str(path)), model, params


@pytest.mark.parametrize('name, size', [('testing', 32), ('testing-unpooled', 32),
                                        ('ViT-Ti_16', 32), ('R+ViT-Ti_16', 64)])
def test_small_presets_load_without_model(name, size, tmp_path):
  path, model, params = _write(name, size, tmp_path / 'x.npz')
  by_file = loading.load_model(path)
  by_name = loading.load_model(path, name)
  assert by_file.config.model_name == name and by_file.image_size == size
  assert _comparable(by_file.config) == _comparable(by_name.config)
  _same(by_file.config, config_lib.with_model(config_lib.get_config(), name).model)
  x = images(2, size, size)
  np.testing.assert_array_equal(
      by_file.model.apply({'params': by_file.params}, x, train=False),
      model.apply({'params': params}, x, train=False))


def test_predict_without_model_equals_the_preset_path(tmp_path, capsys):
  path, _, _ = _write('testing', 32, tmp_path / 'x.npz')
  files = write_images(tmp_path / 'images')
  outputs = []
  for flag in ([], ['--model=testing']):
    assert cli.call(predict, ['predict', f'--checkpoint={path}', '--json', *flag, *files]) == 0
    outputs.append(json.loads(capsys.readouterr().out)['results'])
  assert outputs[0] == outputs[1]


def test_mixer_from_an_anonymous_file(tmp_path):
  config = presets.get_config('Mixer-B_16')
  config.update(dict(hidden_dim=32, num_blocks=2, tokens_mlp_dim=8, channels_mlp_dim=48))
  path, model, params = _write(config, 32, tmp_path / 'x.npz', num_classes=3)
  arch = architecture.architecture(npz_format.read_npz(path))
  assert arch.model_name == 'Mixer-custom-32d-2L-p16' and arch.grid == (2, 2)
  _same(arch.config, config, ignore_name=True)
  loaded = loading.load_model(path)
  x = images(2, 32, 32)
  np.testing.assert_array_equal(loaded.model.apply({'params': loaded.params}, x, train=False),
                                model.apply({'params': params}, x, train=False))


def test_first_difference():
  ti, s16 = models.MODEL_CONFIGS['ViT-Ti_16'], models.MODEL_CONFIGS['ViT-S_16']
  assert architecture.first_difference(ti, ti, 'ViT-Ti_16') is None
  assert architecture.first_difference(ti, s16, 'ViT-S_16') == (
      'hidden size 192 in the file, 384 in ViT-S_16')
  assert architecture.first_difference(ti, models.MODEL_CONFIGS['Mixer-B_16'], 'M') == (
      'family ViT in the file, Mixer in M')
  gap = models.MODEL_CONFIGS['ViT-S_16-gap-norep']
  assert architecture.first_difference(gap, s16, 'ViT-S_16') == (
      'class token no in the file, yes in ViT-S_16')


def _run_dir(tmp_path):
  """A quickstart-like run: a custom ViT's params.npz + metadata.json (Fashion-MNIST names)."""
  config = loading.model_config('configs/fashion_mnist_quickstart.py')
  run = tmp_path / 'run'
  _write(config, 28, run / 'params.npz', num_classes=10)
  names = predict.load_labels('fashion_mnist', 10)
  metadata_lib.write_metadata(str(run), model_config=config, image_size=28, class_names=names,
                            dataset='fashion_mnist', step=10, accuracy=0.5)
  return run, config, names


def test_run_directory_predicts_with_label_names(tmp_path, capsys):
  run, config, names = _run_dir(tmp_path)
  meta = json.loads((run / 'metadata.json').read_text())
  assert meta['num_classes'] == 10 and meta['image_size'] == 28 and meta['step'] == 10
  assert metadata_lib.read_metadata(str(run / 'params.npz')) == meta
  files = write_images(tmp_path / 'images')[:2]
  for target in (run, run / 'params.npz'):
    assert cli.call(predict, ['predict', f'--checkpoint={target}', '--json', *files]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result['image_size'] == 28
    assert result['results'][0]['predictions'][0]['label'] in names
  loaded = loading.load_model(str(run))
  assert loaded.config.model_name == config.model_name and loaded.assumed == ()
  assert loaded.config.attention_impl == config.attention_impl  # From the metadata.
  # The metadata describes params.npz only: a copy under another name is read from its shapes.
  (run / 'other.npz').write_bytes((run / 'params.npz').read_bytes())
  assert metadata_lib.read_metadata(str(run / 'other.npz')) is None
  assert loading.load_model(str(run / 'other.npz')).class_names is None


def test_analyze_a_run_directory(tmp_path, capsys):
  run, _, _ = _run_dir(tmp_path)
  out = tmp_path / 'out'
  rc = cli.call(analyze, ['analyze', f'--checkpoint={run}', f'--out={out}',
                          write_images(tmp_path / 'images')[0]])
  assert rc == 0, capsys.readouterr().err
  assert json.loads((out / 'analysis.json').read_text())['token_grid'] == [4, 4]


def test_wrong_model_is_one_short_line(tmp_path, capsys):
  run, _, _ = _run_dir(tmp_path)
  image = write_images(tmp_path / 'images')[0]
  assert cli.call(predict, ['predict', f'--checkpoint={run}', '--model=ViT-Ti_16', image]) == 1
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and len(err) < 300
  assert 'patch size (7, 7) in the file, (16, 16) in ViT-Ti_16' in err and 'drop --model' in err


def test_metadata_that_contradicts_the_file(tmp_path):
  run, config, names = _run_dir(tmp_path)
  config.hidden_size = 64
  metadata_lib.write_metadata(str(run), model_config=config, image_size=28, class_names=names,
                            dataset='fashion_mnist')
  with pytest.raises(checkpoint.CheckpointError, match='hidden size 128 in the file, 64 in '):
    loading.load_model(str(run))


def test_load_pretrained_from_a_run_directory(tmp_path):
  run, config, _ = _run_dir(tmp_path)
  model = models.get_model(config, num_classes=3)
  init = model.init(jax.random.key(1), images(1, 42, 42), train=False)['params']
  params = checkpoint.load_pretrained(pretrained_path=str(run), init_params=init,
                                      model_config=config)
  assert params['Transformer']['posembed_input']['pos_embedding'].shape == (1, 37, 128)


def test_pretrained_location_reads_the_config(tmp_path):
  config = config_lib.with_model(config_lib.get_config(), 'ViT-B_16')
  location = lambda: settings.read(config).pretrained_location()  # noqa: E731
  assert location().path == 'gs://vit_models/imagenet21k/ViT-B_16.npz'
  (tmp_path / 'params.npz').write_bytes(b'')
  config.pretrained_path = str(tmp_path)  # A run directory.
  assert location().path == str(tmp_path / 'params.npz')
  config.pretrained_path, config.pretrained_dir = '', ''
  assert location() is None


def test_fit_posemb_learn_2d_per_axis():
  config = _vit('l2', posemb='learn_2d')
  rows = np.arange(6, dtype=np.float32)[:, None] * np.ones((1, 8), np.float32)
  params = {'cls': np.zeros((1, 1, 16)), 'Transformer': {'posembed_input': {
      'pos_embedding_row': rows, 'pos_embedding_col': rows[:4],
      'pos_embedding_prefix': np.zeros((1, 1, 16))}}}
  fitted = surgery.fit_posemb(params, config, (11, 4))['Transformer']['posembed_input']
  np.testing.assert_allclose(fitted['pos_embedding_row'][:, 0], np.arange(11) / 2, atol=1e-6)
  np.testing.assert_array_equal(fitted['pos_embedding_col'], rows[:4])  # Already 4 columns.
  assert params['Transformer']['posembed_input']['pos_embedding_row'] is rows  # Not in place.


def _exported_run(tmp_path, **fields):
  """What a run exports: params.npz with its description embedded, and metadata.json beside it."""
  config = _vit('n', patch=7, **fields)
  model = models.get_model(config, num_classes=3)
  params = perturb(model.init(jax.random.key(0), images(1, 28, 28), train=False)['params'])
  run = tmp_path / 'run'
  description = dict(model_config=config, image_size=28, class_names=['a', 'b', 'c'],
                     dataset='folder', step=2)
  checkpoint.save(params, str(run / 'params.npz'),
                  metadata=metadata_lib.describe_run(**description))
  metadata_lib.write_metadata(str(run), **description)
  return run, model, params


def _logits(loaded):
  x = images(2, loaded.image_size, loaded.image_size, seed=3)
  return np.asarray(loaded.model.apply({'params': loaded.params}, x, train=False))


@pytest.mark.parametrize('fields', [dict(posemb='none'), dict(classifier='token_unpooled'),
                                    dict(classifier='unpooled', posemb='none')])
def test_a_renamed_copy_of_an_export_is_the_same_model(fields, tmp_path):
  """cp run/params.npz elsewhere/fmnist_vit.npz: the copy says what model it is (issue 28.5)."""
  run, model, params = _exported_run(tmp_path, **fields)
  copy = tmp_path / 'elsewhere' / 'fmnist_vit.npz'
  copy.parent.mkdir()
  copy.write_bytes((run / 'params.npz').read_bytes())
  original, renamed = loading.load_model(str(run)), loading.load_model(str(copy))
  assert renamed.assumed == () and renamed.image_size == 28
  assert renamed.class_names == ('a', 'b', 'c')
  for key, value in fields.items():
    assert renamed.config[key] == value
  np.testing.assert_array_equal(_logits(renamed), _logits(original))
  x = images(2, 28, 28, seed=3)
  np.testing.assert_array_equal(_logits(renamed), model.apply({'params': params}, x, train=False))


def test_the_description_is_invisible_to_npz_readers(tmp_path):
  """np.load (the official loader, timm) sees exactly the published keys and arrays."""
  run, _, params = _exported_run(tmp_path, posemb='none')
  bare = checkpoint.save(params, str(tmp_path / 'bare.npz'))
  with np.load(run / 'params.npz', allow_pickle=False) as exported, np.load(bare) as plain:
    assert sorted(exported.files) == sorted(plain.files)
    for key in plain.files:
      np.testing.assert_array_equal(exported[key], plain[key])
  assert metadata_lib.embedded_metadata(bare) is None
  assert metadata_lib.embedded_metadata(str(run / 'params.npz'))['model']['posemb'] == 'none'


def test_a_bare_npz_warns_once_naming_what_it_assumed(tmp_path, caplog):
  """A posemb='none' file without description: read as sincos2d at 224px, said in ONE line."""
  run, _, params = _exported_run(tmp_path, posemb='none')
  bare = checkpoint.save(params, str(tmp_path / 'fmnist_vit.npz'))
  with caplog.at_level('WARNING'):
    loaded = loading.load_model(bare)
  warnings = [r.getMessage() for r in caplog.records if r.levelname == 'WARNING']
  assert len(warnings) == 1, warnings
  for said in ('posemb sincos2d', 'classifier token', 'dropout_rate 0.0', 'image_size 224',
               'fmnist_vit.json', '--model'):
    assert said in warnings[0], warnings[0]
  assert loaded.config.posemb == 'sincos2d' and loaded.image_size == 224
  # The warning is right to worry: the same weights give other logits than the run's model.
  at_28 = loading.load_model(bare, image_size=28)
  assert np.abs(_logits(at_28) - _logits(loading.load_model(str(run)))).max() > 1e-3
  # Stated in <name>.json beside the file (the metadata.json format), nothing is assumed.
  (tmp_path / 'fmnist_vit.json').write_text((run / 'metadata.json').read_text())
  caplog.clear()
  with caplog.at_level('WARNING'):
    stated = loading.load_model(bare)
  assert not [r for r in caplog.records if r.levelname == 'WARNING']
  assert stated.config.posemb == 'none' and stated.image_size == 28 and stated.assumed == ()


def test_a_stale_json_beside_a_described_copy_is_named_in_one_warning(tmp_path, caplog):
  """cp run/params.npz over model.npz whose model.json (another run's) stays beside it: the
  .json still decides (the user wrote it), but one warning names what it contradicts."""
  run, _, _ = _exported_run(tmp_path, posemb='none')
  copy = tmp_path / 'model.npz'
  copy.write_bytes((run / 'params.npz').read_bytes())
  stale = json.loads((run / 'metadata.json').read_text())
  stale['model']['posemb'] = 'sincos2d'
  (tmp_path / 'model.json').write_text(json.dumps(stale))
  with caplog.at_level('WARNING'):
    assert metadata_lib.read_metadata(str(copy))['model']['posemb'] == 'sincos2d'
  warnings = [r.getMessage() for r in caplog.records if r.levelname == 'WARNING']
  assert len(warnings) == 1 and "posemb 'sincos2d' (inside: 'none')" in warnings[0], warnings
  (tmp_path / 'model.json').write_text((run / 'metadata.json').read_text())  # Agrees: silent.
  caplog.clear()
  with caplog.at_level('WARNING'):
    assert metadata_lib.read_metadata(str(copy))['model']['posemb'] == 'none'
  assert not [r for r in caplog.records if r.levelname == 'WARNING']


def test_fine_tuning_a_described_file_with_another_posemb_warns(tmp_path, caplog):
  """sincos2d and none have the same (no) parameters: only the description can tell."""
  run, model, params = _exported_run(tmp_path, posemb='none')
  config = _vit('n', patch=7, posemb='sincos2d')
  init = models.get_model(config, num_classes=5).init(
      jax.random.key(1), images(1, 28, 28), train=False)['params']
  with caplog.at_level('WARNING'):
    checkpoint.load_pretrained(pretrained_path=str(run), init_params=init, model_config=config)
  warnings = [r.getMessage() for r in caplog.records if r.levelname == 'WARNING']
  assert len(warnings) == 1 and "posemb 'none' in the file, 'sincos2d' in the config" in warnings[0]
  caplog.clear()
  with caplog.at_level('WARNING'):
    checkpoint.load_pretrained(pretrained_path=str(run), init_params=init,
                               model_config=_vit('n', patch=7, posemb='none'))
  assert not [r for r in caplog.records if r.levelname == 'WARNING']


def test_fine_tuning_a_file_without_a_model_name_builds_the_described_model(tmp_path, caplog):
  """configs/hub.py (model read from --config.pretrained_path) on a renamed posemb='none'
  export: the embedded description decides (it built sincos2d); a bare copy warns ONCE."""
  from vit_jax.training import from_checkpoint  # noqa: PLC0415  # TF-heavy, only here.
  run, _, params = _exported_run(tmp_path, posemb='none')
  copy = tmp_path / 'fmnist_vit.npz'
  copy.write_bytes((run / 'params.npz').read_bytes())
  config = config_lib.get_config()
  config.pretrained_path = str(copy)
  assert from_checkpoint.with_checkpoint_model(settings.read(config)).model_config.posemb == 'none'
  bare = checkpoint.save(params, str(tmp_path / 'bare.npz'))
  config.pretrained_path = bare
  with caplog.at_level('WARNING'):
    completed = from_checkpoint.with_checkpoint_model(settings.read(config))
    assert completed.model_config.posemb == 'sincos2d'
  warnings = [r.getMessage() for r in caplog.records if r.levelname == 'WARNING']
  assert len(warnings) == 1 and 'posemb sincos2d' in warnings[0] and 'bare.json' in warnings[0]
