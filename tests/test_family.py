"""The model family is declared (`family`), read by `presets.family_of`, never sniffed from keys."""

import ast
import json
import pathlib
import re

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from vit_jax import config_lib
from vit_jax import models
from vit_jax import presets
from vit_jax.weights import architecture
from vit_jax.weights import metadata as metadata_lib
from vit_jax.weights import npz_format

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / 'vit_jax'
# What deciding a family from a config's keys looked like: the removed is_* helpers and tests
# for a family's own keys (a hybrid's `resnet`, a Mixer's `hidden_dim`, ...).
SNIFFING = re.compile(r"\bis_(mixer|swin|resnet)\(|\.get\(['\"]resnet['\"]\)|"
                      r"['\"](hidden_dim|window_size|stage_sizes|patches)['\"] (not )?in ")


def _lines_of(path, function):
  """The line numbers of `function`'s body in the module at `path`."""
  node = next(n for n in ast.parse(path.read_text()).body
              if isinstance(n, ast.FunctionDef) and n.name == function)
  return range(node.lineno, node.end_lineno + 1)


def test_no_family_is_sniffed_from_config_keys():
  # The one reader of the family may look at the ResNet root: not to decide the family, but to
  # refuse a declared one the model's root contradicts (the hybrid's "two truths").
  allowed = {PACKAGE / 'presets.py': _lines_of(PACKAGE / 'presets.py', 'family_of')}
  found = [f'{path.relative_to(PACKAGE.parent)}:{n}: {line.strip()}'
           for path in sorted(PACKAGE.rglob('*.py'))
           for n, line in enumerate(path.read_text().splitlines(), 1)
           if SNIFFING.search(line) and n not in allowed.get(path, ())]
  assert not found, 'decide the family with presets.family_of:\n' + '\n'.join(found)


def test_every_preset_declares_its_family():
  expected = {'Mixer-B_16': 'mixer', 'R50+ViT-B_16': 'hybrid', 'ViT-B_16': 'vit',
              'ResNet-50': 'resnet', 'Swin-T_4_7': 'swin', 'testing': 'vit'}
  assert {name: presets.family_of(models.MODEL_CONFIGS[name]) for name in expected} == expected
  assert all(config.family in presets.FAMILIES for config in models.MODEL_CONFIGS.values())
  assert presets.family_of(config_lib.small_vit('x', patch=7, hidden=8, layers=1, mlp=8, heads=2,
                                                resnet_layers=(1,))) == 'hybrid'


def test_a_config_without_family_is_one_clear_error():
  config = dict(models.MODEL_CONFIGS['ViT-B_16'].to_dict())
  del config['family']
  with pytest.raises(ValueError, match=r"ViT-B_16 declares family=None; set its `family`"):
    presets.family_of(config)


@pytest.mark.parametrize('name', ['testing', 'R+ViT-Ti_16', 'Swin-testing', 'ResNet-11_28px'])
def test_official_api_accepts_the_family_field_and_params_are_unchanged(name):
  config = models.MODEL_CONFIGS[name]
  without = {k: v for k, v in config.to_dict().items() if k != 'family'}
  module = models.MODULES[config.family]
  x = jnp.zeros((1, 32, 32, 3))
  shapes = [jax.tree.map(lambda a: a.shape, jax.eval_shape(
      lambda m=m: m.init(jax.random.key(0), x, train=False))) for m in (
          module(num_classes=3, **config), module(num_classes=3, **without))]
  assert shapes[0] == shapes[1]


def _run_without_family(tmp_path, model_name, config):
  """A run directory as written before configs declared `family`."""
  model = models.get_model(config, num_classes=3)
  params = model.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)), train=False)['params']
  run = tmp_path / 'run'
  npz_format.write_npz(jax.tree.map(np.asarray, params), str(run / 'params.npz'))
  described = architecture.plain_config(config)
  described.pop('family')
  described['model_name'] = model_name
  (run / 'metadata.json').write_text(json.dumps(dict(params_file='params.npz', model=described,
                                                     image_size=32)))
  return str(run)


def test_old_run_description_gets_its_family_from_its_preset_name(tmp_path):
  config = config_lib.with_model(config_lib.get_config(), 'Mixer-B_16').model
  config.update(dict(hidden_dim=16, num_blocks=1, tokens_mlp_dim=8, channels_mlp_dim=16))
  run = _run_without_family(tmp_path, 'Mixer-B_16', config)
  assert metadata_lib.read_metadata(run)['model']['family'] == 'mixer'


def test_old_run_description_of_a_custom_model_gets_its_family_from_the_shapes(tmp_path):
  config = config_lib.small_vit('mine', patch=8, hidden=16, layers=1, mlp=16, heads=2,
                                resnet_layers=(1,))
  run = _run_without_family(tmp_path, 'mine', ml_collections.ConfigDict(config))
  assert metadata_lib.read_metadata(run)['model']['family'] == 'hybrid'
