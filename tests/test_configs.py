"""Every config file builds, and every `--config.X` the docs mention exists (no config drift)."""

import glob
import math
import os
import re
import subprocess
import sys

import ml_collections
import pytest

from vit_jax import config_lib
from vit_jax import presets

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_FILES = sorted(glob.glob(os.path.join(ROOT, 'configs', '*.py')))
FLAG = re.compile(r'--config\.([A-Za-z_][\w.]*)')


def load_config(path):
  module = config_lib.load_config_module(path)
  return module, module.get_config()


def has_field(config, dotted):
  node = config
  for part in dotted.split('.'):
    if not isinstance(node, ml_collections.ConfigDict) or part not in node:
      return False
    node = node[part]
  return True


@pytest.mark.parametrize('path', CONFIG_FILES, ids=os.path.basename)
def test_config_builds_and_its_docstring_flags_exist(path):
  module, config = load_config(path)
  assert module.__doc__ and 'python -m vit_jax.main' in module.__doc__
  assert 'Expected' in module.__doc__  # Each file states what result to expect.
  for flag in FLAG.findall(module.__doc__):
    assert has_field(config, flag), f'{os.path.basename(path)} mentions --config.{flag}'


def readme_configs():
  base = config_lib.with_model(config_lib.get_config(), 'ViT-B_16')
  return [base] + [load_config(p)[1] for p in CONFIG_FILES]


@pytest.mark.parametrize('doc', ['README.md', 'checkpoints/README.md'])
def test_every_config_flag_in_the_docs_exists(doc):
  with open(os.path.join(ROOT, doc)) as f:
    flags = set(FLAG.findall(f.read()))
  configs = readme_configs()
  missing = sorted(f for f in flags if not any(has_field(c, f) for c in configs))
  assert not missing, f'{doc} mentions config fields that do not exist: {missing}'


def test_parameterised_vit_config():
  _, config = load_config(os.path.join(ROOT, 'configs', 'vit.py'))
  module, _ = load_config(os.path.join(ROOT, 'configs', 'vit.py'))
  config = module.get_config('r50_b16,cifar100')
  assert config.model.model_name == 'R50+ViT-B_16' and config.dataset == 'cifar100'
  with pytest.raises(ValueError, match='MODEL,DATASET'):
    module.get_config('b16')


@pytest.mark.parametrize('arm,params', [('vit_small', 10_695_562), ('vit_b16_scratch', 85_806_346),
                                        ('resnet50_scratch', 23_520_842),
                                        ('vit_b16_finetune', 86_098_186)])
def test_cifar10_plan_arms_build_their_models(arm, params):
  import jax
  import jax.numpy as jnp
  from vit_jax import models
  module, _ = load_config(os.path.join(ROOT, 'configs', 'cifar10_plan.py'))
  config = module.get_config(arm)
  assert config.dataset == 'cifar10'
  assert (config.pretrained_dir == '') == (arm != 'vit_b16_finetune')
  model = models.get_model(config.model, num_classes=10)
  x = jnp.zeros((1, config.pp.crop, config.pp.crop, 3))
  shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), x, train=False))
  assert sum(math.prod(a.shape) for a in jax.tree.leaves(shapes)) == params
  with pytest.raises(ValueError, match='Unknown arm'):
    module.get_config('vit_tiny')


def test_augreg_config_picks_the_preset_from_the_file_name():
  module, _ = load_config(os.path.join(ROOT, 'configs', 'augreg.py'))
  config = module.get_config('R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0,cifar10')
  assert config.model.model_name == 'R26+ViT-S_32'
  assert config.pretrained_dir == 'gs://vit_models/augreg'


@pytest.mark.parametrize('name,crop,grid', [('fashion_mnist_quickstart', 28, (4, 4)),
                                            ('fashion_mnist_full', 56, (7, 7))])
def test_fashion_mnist_models_build_with_their_token_grids(name, crop, grid):
  import jax
  import jax.numpy as jnp
  from vit_jax import models
  config = load_config(os.path.join(ROOT, 'configs', f'{name}.py'))[1]
  config = config.get('pretrain', config)
  assert config.pp.crop == crop and models.token_grid(config.model, (crop, crop)) == grid
  model = models.get_model(config.model, num_classes=10)
  x = jnp.zeros((2, crop, crop, 3))
  params = model.init(jax.random.key(0), x, train=False)['params']
  assert model.apply({'params': params}, x, train=False).shape == (2, 10)


def test_fashion_mnist_full_runs_stage_one_alone():
  module, both = load_config(os.path.join(ROOT, 'configs', 'fashion_mnist_full.py'))
  alone = module.get_config('pretrain')
  assert alone.get('trainer', 'train') == 'train'
  assert alone.to_dict() == both.pretrain.to_dict()
  with pytest.raises(ValueError, match='Unknown stages'):
    module.get_config('finetune')


@pytest.mark.parametrize('name', ['vit_b16_cifar10.py', 'vit.py', 'augreg.py',
                                  'fashion_mnist_quickstart.py'])
def test_loading_a_config_imports_no_jax(name):
  """Configs are data: building one must not pay for importing jax, flax, scipy or TF."""
  path = os.path.join(ROOT, 'configs', name)
  code = ('import importlib.util, sys; '
          f's = importlib.util.spec_from_file_location("c", {path!r}); '
          'm = importlib.util.module_from_spec(s); s.loader.exec_module(m); m.get_config(); '
          'print(sorted(k for k in sys.modules if k.split(".")[0] in '
          '("jax", "flax", "scipy", "tensorflow")))')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True)
  assert out.stdout.strip() == '[]', out.stdout


@pytest.mark.parametrize('arg, crop', [('s16,fashion_mnist', 384), ('b16,cifar10', 384),
                                       ('b16,/data/my_images', 384), ('h14,cifar10', 392),
                                       ('r_ti16,cifar100', 384), ('b32,oxford_iiit_pet', 384)])
def test_fine_tuning_resolution_follows_the_model(arg, crop):
  """The published fine-tuning resolution in whole tokens, whatever the dataset's image size."""
  module, _ = load_config(os.path.join(ROOT, 'configs', 'vit.py'))
  config = module.get_config(arg)
  assert config.pp.crop == crop
  assert crop % presets.token_stride(config.model) == 0
