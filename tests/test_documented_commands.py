"""Every `python -m vit_jax...` command of the README and of the configs' docstrings runs.

Each command runs as printed, in a scratch directory that links `configs/`, with three changes:
- the `runlocal` shrink switch is added to its `--config=FILE[:ARG]` (`config_lib.shrink`: a
  one-block model of the same family and token stride, 2 steps of batch 8) and to a study's
  `--grid=FILE[:ARG]` (a few such runs);
- the paths the docs use for the user's files (/data/..., cat.jpg, my_photos/) point at a
  generated image folder, images and a small published-format npz;
- downloads are pre-placed in the checkpoint cache (`$VIT_JAX_CHECKPOINTS`), and TFDS datasets
  are `tfds.testing.mock_data` (`tests/mocked_run.py`), so nothing touches the network.
A documented command that breaks (a renamed flag, a config field, a split a folder cannot
serve, an impossible resolution) fails here.
"""

import glob
import json
import os
import re
import shlex
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

from npz_fixtures import timm_swin_state_dict
from test_configs import CONFIG_FILES, load_config
from vit_jax import checkpoint
from vit_jax import config_lib
from vit_jax import input_pipeline
from vit_jax import models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMAND = re.compile(r'python -m vit_jax\.\w+')
CLASSES = ('ankle boot', 'bag', 'coat')


def commands_in(text):
  """`python -m vit_jax...` commands of `text`, backslash continuations joined."""
  text = re.sub(r'\\\n\s*', ' ', text)
  found = []
  for line in text.splitlines():
    match = COMMAND.search(line)
    if match:
      found.append(line[match.start():].split('  #')[0].strip().rstrip('`').strip())
  return found


def readme_commands():
  with open(os.path.join(ROOT, 'README.md')) as f:
    blocks = re.findall(r'```(?:bash|sh)\n(.*?)```', f.read(), re.S)
  return [c for block in blocks for c in commands_in(block)]


def docstring_commands():
  return [c for path in CONFIG_FILES for c in commands_in(load_config(path)[0].__doc__)]


DOCUMENTED = sorted(set(readme_commands() + docstring_commands()))


def with_runlocal(command):
  """--config=FILE → FILE:runlocal; --config=FILE:ARG → FILE:ARG,runlocal (--grid= too)."""
  return re.sub(r'--(config|grid)=(\S+?\.py)(?::(\S+))?(?=\s|$)',
                lambda m: f'--{m[1]}={m[2]}:{m[3] + "," if m[3] else ""}runlocal', command)


def write_images(folder, count, size=40, seed=0):
  rng = np.random.default_rng(seed)
  os.makedirs(folder, exist_ok=True)
  for i in range(count):
    array = rng.integers(0, 256, (size, size + 8, 3), dtype=np.uint8)
    Image.fromarray(array).save(os.path.join(folder, f'{i}.jpg'))


@pytest.fixture(scope='module')
def scratch(tmp_path_factory):
  """A working directory with configs/, a user's image folder, photos and a checkpoint cache."""
  work = tmp_path_factory.mktemp('documented')
  os.symlink(os.path.join(ROOT, 'configs'), work / 'configs')
  for split in ('train', 'test'):
    for label, name in enumerate(CLASSES):
      write_images(work / 'data' / 'my_images' / split / name, 6 if split == 'train' else 2,
                   seed=label)
  for name in CLASSES:  # /data/imagenet21k: enough images that 1% of them is an eval split.
    write_images(work / 'data' / 'imagenet21k' / 'train' / name, 40, size=16)
  write_images(work / 'my_photos', 3, seed=7)
  os.rename(work / 'my_photos' / '0.jpg', work / 'cat.jpg')
  return work


def substitute(command, work):
  """The user's paths in `command` → the scratch directory's files."""
  return re.sub(r'(?<=[ =,])/data/', f'{work}/data/', command)


def write_npz(model_config, path, num_classes, image_size):
  model = models.get_model(model_config, num_classes=num_classes)
  params = jax.jit(lambda: model.init(jax.random.key(0), jnp.zeros((1, image_size, image_size, 3)),
                                      train=False))()['params']
  checkpoint.save(jax.device_get(params), path)


def write_timm_folder(model_config, folder, num_classes, image_size):
  """A timm hub folder (model.safetensors + config.json) of random Swin weights."""
  from safetensors.numpy import save_file
  os.makedirs(folder, exist_ok=True)
  save_file(timm_swin_state_dict(model_config, num_classes, image_size),
            os.path.join(folder, 'model.safetensors'))
  with open(os.path.join(folder, 'config.json'), 'w') as f:
    json.dump({'architecture': 'swin_tiny_patch4_window7_224', 'num_classes': num_classes,
               'pretrained_cfg': {'input_size': [3, image_size, image_size],
                                  'mean': [0.485, 0.456, 0.406], 'std': [0.229, 0.224, 0.225]}},
              f)


def config_of(command, work):
  """The experiment config `command` runs (its --config file with the overrides it names)."""
  args = shlex.split(command)
  spec = next(a.split('=', 1)[1] for a in args if a.startswith('--config='))
  path, _, arg = spec.partition(':')
  module, _ = load_config(os.path.join(ROOT, path))
  config = module.get_config(arg).unlock()
  for a in args:
    if a.startswith('--config.') and '=' in a:
      key, value = a[len('--config.'):].split('=', 1)
      if key in ('dataset', 'pretrained_path'):
        config[key] = value
  return config


def place_pretrained(command, work):
  """Writes the npz a fine-tuning command starts from where it will look for it."""
  config = config_of(command, work)
  stages = [config[s] for s in ('pretrain', 'finetune') if s in config] or [config]
  for stage in stages:
    if 'model' not in stage or not stage.get('pretrained_path') and not stage.get(
        'pretrained_dir'):
      continue
    path = checkpoint.pretrained_path(stage)
    if path is None:
      continue
    local = checkpoint.cache_path(path, str(work / 'cache')) if checkpoint.is_remote(path) else path
    os.makedirs(os.path.dirname(local), exist_ok=True)
    if models.is_swin(stage.model) and not local.endswith('.npz'):  # timm's hub folder.
      write_timm_folder(stage.model, local, 10, stage.pp.crop)
    else:
      write_npz(stage.model, local, 10, stage.pp.crop)


def place_published(command, work):
  """`--checkpoint=NAME` of a tool → a small published-format file in the cache."""
  match = re.search(r'--checkpoint=(\S+)', command)
  if not match or os.path.exists(work / match[1]) or match[1].startswith('runs/'):
    return
  path = checkpoint.resolve_name(match[1])
  if checkpoint.is_remote(path):
    model = config_lib.finetune_config('ViT-B_16', 'cifar10', runlocal=True).model
    write_npz(model, checkpoint.cache_path(path, str(work / 'cache')), 1000, 32)


def run(command, work, timeout=600):
  module, *args = shlex.split(command.replace('python -m ', '', 1))
  env = dict(os.environ, VIT_JAX_CHECKPOINTS=str(work / 'cache'), JAX_PLATFORMS='cpu',
             VIT_JAX_HUGEPAGES='0', TF_CPP_MIN_LOG_LEVEL='2')
  env.pop('XLA_FLAGS', None)
  proc = subprocess.run([sys.executable, os.path.join(ROOT, 'tests', 'mocked_run.py'), module,
                         *args], cwd=work, env=env, capture_output=True, text=True,
                        timeout=timeout)
  assert proc.returncode == 0, f'{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}'
  return proc.stdout


@pytest.fixture(scope='module')
def quickstart_run(scratch):
  """runs/quickstart/finetune of the shrunk quickstart: the run directory the tools document."""
  run(with_runlocal('python -m vit_jax.main --config=configs/fashion_mnist_quickstart.py '
                    '--workdir=runs/quickstart'), scratch)
  return scratch / 'runs' / 'quickstart' / 'finetune'


def test_the_docs_have_commands():
  names = {c.split()[2] for c in DOCUMENTED}
  assert {'vit_jax.main', 'vit_jax.predict', 'vit_jax.analyze'} <= names, names
  assert any('/data/my_images' in c for c in DOCUMENTED)  # The folder fine-tuning command.


FOLDER_COMMAND = next(c for c in readme_commands() if '--config.dataset=/data/my_images' in c)


@pytest.mark.parametrize('layout', ['test', 'val', 'train_only'])
def test_readme_folder_command_evaluates_every_held_out_image(layout, tmp_path):
  """The README's fine-tune-on-my-folder command, with test/, val/ or only train/ images."""
  os.symlink(os.path.join(ROOT, 'configs'), tmp_path / 'configs')
  root = tmp_path / 'data' / 'my_images'
  for label, name in enumerate(CLASSES):
    write_images(root / 'train' / name, 50 if layout == 'train_only' else 8, seed=label)
    if layout != 'train_only':
      write_images(root / layout / name, 3, seed=10 + label)
  local = substitute(with_runlocal(FOLDER_COMMAND), tmp_path) + ' --workdir=runs/folder'
  place_pretrained(local, tmp_path)
  out = run(local, tmp_path)
  counted = int(re.search(r"'num_examples': (\d+)", out)[1])
  # Train-only: the last 2% of train/ (TFDS slicing of 150 files) is held out for evaluation.
  held_out = len(input_pipeline._folder_split(str(root), CLASSES, input_pipeline.HELD_OUT_SPLIT)[0])
  assert counted == (9 if layout != 'train_only' else held_out) and counted > 0


@pytest.mark.parametrize('command', DOCUMENTED)
def test_documented_command_runs(command, scratch, quickstart_run):
  assert os.path.isfile(quickstart_run / 'params.npz')
  local = substitute(with_runlocal(command), scratch)
  if '--config=' in local:
    place_pretrained(local, scratch)
  place_published(local, scratch)
  out = run(local, scratch)
  if 'vit_jax.predict' in command and 'runs/quickstart' in command:
    assert any(name in out for name in ('T-shirt/top', 'Trouser', 'Ankle boot')), out
  if 'vit_jax.analyze' in command:
    assert glob.glob(str(scratch / 'figures' / '*.png'))
