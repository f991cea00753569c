"""Every `python -m vit_jax...` (or `research...`) command of the README and of the configs'
docstrings runs; every command of docs/*.md runs too, or, where
`NOT_RUN` says why, is checked for its flags (the module or script exists and defines each flag
it names; each `--config.*` field exists in its config).

Each command runs as printed, in a scratch directory that links `configs/`, with three changes:
- the `runlocal` shrink switch is added to its `--config=FILE[:ARG]` (`config_lib.shrink`: a
  one-block model of the same family and token stride, 2 steps of batch 8) and to a study's
  `--grid=FILE[:ARG]` (a few such runs);
- the paths the docs use for the user's files (/data/..., cat.jpg, my_photos/) point at a
  generated image folder, images and a small published-format npz;
- downloads are pre-placed in the checkpoint cache (`$VIT_JAX_CACHE`), and TFDS datasets
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

import forked
from npz_fixtures import timm_swin_state_dict
from research.small_data import grid as grid_lib
from research.small_data import records
from test_configs import CONFIG_FILES, load_config
from vit_jax import checkpoint
from vit_jax import config_lib
from vit_jax import models
from vit_jax.data import folder_source
from vit_jax.weights.timm import export as timm_export
from vit_jax.weights import store
from vit_jax.training import settings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMAND = re.compile(r'python -m (?:vit_jax|research)\.\w+')
CLASSES = ('ankle boot', 'bag', 'coat')


def commands_in(text):
  """`python -m vit_jax...`/`research...` commands of `text`, backslash continuations joined."""
  text = re.sub(r'\\\n\s*', ' ', text)
  found = []
  for line in text.splitlines():
    match = COMMAND.search(line)
    if match:
      found.append(line[match.start():].split('  #')[0].strip().rstrip('`').strip())
  return found


# Pages whose ```bash blocks are commands a user copies (docs/hub_weights.md: timm weights).
COMMAND_PAGES = ('README.md', os.path.join('docs', 'hub_weights.md'))


def readme_commands():
  blocks = []
  for page in COMMAND_PAGES:
    with open(os.path.join(ROOT, page)) as f:
      blocks += re.findall(r'```(?:bash|sh)\n(.*?)```', f.read(), re.S)
  return [c for block in blocks for c in commands_in(block)]


def docstring_commands():
  return [c for path in CONFIG_FILES for c in commands_in(load_config(path)[0].__doc__)]


DOCUMENTED = sorted(set(readme_commands() + docstring_commands()))

DOC_PAGES = sorted(glob.glob(os.path.join(ROOT, 'docs', '*.md')))
# A command in prose: optional VAR=value assignments, then a module of the package or a script.
DOC_COMMAND = re.compile(
    r'(?:[A-Z_]+=\S+ )*python (?:-m (?:vit_jax|research)\.\w+|benchmarks/\w+\.py)')


def page_commands(path):
  """Commands of a doc page: its bash/sh blocks' lines and its inline `code` spans."""
  with open(path) as f:
    text = f.read()
  blocks = re.findall(r'```(?:bash|sh)\n(.*?)```', text, re.S)
  found = [c for block in blocks for c in commands_in(block)]
  for span in re.findall(r'`([^`]+)`', re.sub(r'```.*?```', '', text, flags=re.S)):
    match = DOC_COMMAND.search(' '.join(span.split()))
    if match:
      found.append(' '.join(span.split())[match.start():])
  return found


# Doc commands that are checked for their flags only, and why they do not run here.
NOT_RUN = (
    (r'^python benchmarks/(vs_timm|scaling|root_conv|param_sharding|resume_time|'
     r'input_pipeline|hugepages|gpu_e2e|quickstart_steps)\.py',
     'a benchmark: minutes of timing on the machine it measures (test_benchmark.py runs '
     'vs_timm small and quickstart_steps\' parts, test_gpu_e2e.py gpu_e2e --tiny)'),
    (r'=(FILE|DIR|W|M|B|S)\b', 'a syntax line: FILE, DIR, W, M, B, S are placeholders'),
    (r'/tmp/(fmnist_|random_b16|photos|startup_)',
     'a record of a past run: its files were on that machine'),
    (r'runs/study\w*/', 'a row of a study round\'s generated run list (the study command above '
     'runs its arms, shrunk)'),
    (r'fmnist_bottleneck', 'a record: the config comes from git history (git show c9cf345)'),
    (r'--report', 'rewrites the repo\'s docs/ from a finished runs/study'),
    (r'^python -m (vit_jax|research)\.\w+$', 'a module named in prose'),
)


def not_run_reason(command):
  return next((why for pattern, why in NOT_RUN if re.search(pattern, command)), None)


def runs_what(command):
  """What a command runs: its module or script with its --config=FILE[:ARG] (--grid: FILE)."""
  config = re.search(r'--config=(\S+)', command)
  grid = re.search(r'--grid=([^\s:]+)', command)
  words = [w for w in shlex.split(command) if '=' not in w.split()[0] or w.startswith('-')]
  return words[2] if words[1] == '-m' else words[1], (config or grid or [None, None])[1]


def doc_runs(commands):
  """The doc commands to run: not in `NOT_RUN`, and each (module, config[:arg]) or grid file
  once, with the fewest words, counting the README's and the docstrings' (which run already).
  The others get their flags and fields checked (`test_doc_command_flags_exist`).
  """
  covered = {runs_what(c) for c in DOCUMENTED}
  chosen = []
  for command in sorted(commands, key=lambda c: (len(c.split()), c)):
    if not_run_reason(command) is None and runs_what(command) not in covered:
      covered.add(runs_what(command))
      chosen.append(command)
  return sorted(chosen)


DOC_DOCUMENTED = sorted({c for page in DOC_PAGES for c in page_commands(page)} - set(DOCUMENTED))
DOC_RUN = doc_runs(DOC_DOCUMENTED)


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
  """A working directory with configs/, research/ (grid files), a user's image folder, photos and
  a checkpoint cache."""
  work = tmp_path_factory.mktemp('documented')
  os.symlink(os.path.join(ROOT, 'configs'), work / 'configs')
  os.symlink(os.path.join(ROOT, 'research'), work / 'research')
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
  return re.sub(r'(?<=[ =,:])/data/', f'{work}/data/', command)


def write_npz(model_config, path, num_classes, image_size):
  model = models.get_model(model_config, num_classes=num_classes)
  params = jax.jit(lambda: model.init(jax.random.key(0), jnp.zeros((1, image_size, image_size, 3)),
                                      train=False))()['params']
  checkpoint.save(jax.device_get(params), path)


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
    if stage.get('model', 1) is None and stage.get('pretrained_path'):
      write_timm_folder(os.path.join(work, stage.pretrained_path))
      continue
    if 'model' not in stage or not stage.get('pretrained_path') and not stage.get(
        'pretrained_dir'):
      continue
    location = settings.read(stage).pretrained_location()
    if location is None:
      continue
    path = location.path
    local = store.cache_path(path, str(work / 'cache')) if store.is_remote(path) else path
    os.makedirs(os.path.dirname(local), exist_ok=True)
    if models.family_of(stage.model) == 'swin' and not local.endswith('.npz'):  # timm's hub folder.
      write_timm_folder(local, swin_model=stage.model, image_size=stage.pp.crop)
    else:
      write_npz(stage.model, local, 10, stage.pp.crop)


def write_timm_folder(folder, swin_model=None, image_size=None):
  """A tiny timm hub folder (model.safetensors + config.json) for a documented command.

  With `swin_model`: random weights of that Swin config in timm's layout (10 classes, at
  `image_size`). Else a ViT in the style the folder's name says (CLIP: norm_pre, no patch
  bias, eps 1e-5; else DINOv2: LayerScale, exact GELU), written by vit_jax's own timm export.
  """
  from safetensors.numpy import save_file
  from vit_jax import presets
  if swin_model is not None:
    os.makedirs(folder, exist_ok=True)
    save_file(timm_swin_state_dict(swin_model, 10, image_size),
              os.path.join(folder, 'model.safetensors'))
    with open(os.path.join(folder, 'config.json'), 'w') as f:
      json.dump({'architecture': 'swin_tiny_patch4_window7_224', 'num_classes': 10,
                 'model_args': {  # The shrunk model's sizes, as timm records them.
                     'embed_dim': swin_model['embed_dim'], 'depths': list(swin_model['depths']),
                     'num_heads': list(swin_model['num_heads']),
                     'window_size': swin_model['window_size']},
                 'pretrained_cfg': {'input_size': [3, image_size, image_size],
                                    'mean': [0.485, 0.456, 0.406],
                                    'std': [0.229, 0.224, 0.225]}}, f)
    return
  architecture = os.path.basename(folder).split('.')[0]
  if architecture in presets.MODEL_CONFIGS and presets.family_of(
      presets.MODEL_CONFIGS[architecture]) == 'eva':
    write_eva_folder(folder, architecture)
    return
  clip = 'clip' in os.path.basename(folder)
  config = dict(presets.VIT_EXTRAS, family='vit', model_name=os.path.basename(folder).split('.')[0],
                patches={'size': (16, 16) if clip else (14, 14)}, hidden_size=32,
                classifier='token', representation_size=None, activation='gelu',
                transformer=dict(num_layers=1, num_heads=2, mlp_dim=64, dropout_rate=0.,
                                 attention_dropout_rate=0.))
  config.update(dict(norm_pre=True, patch_bias=False, layer_norm_eps=1e-5) if clip else
                dict(layer_scale=1e-5))
  size = 2 * config['patches']['size'][0]
  model = models.get_model(config, num_classes=0)
  params = model.init(jax.random.key(0), jnp.zeros((1, size, size, 3)), train=False)['params']
  timm_export.export(jax.device_get(params), config, folder, num_classes=0, image_size=size)


def write_eva_folder(folder, architecture):
  """timm's `architecture` (an EVA-family preset) with one block at a 2x2 grid, random, written
  by vit_jax's own timm export (its layout is timm's: tests/test_timm_architectures.py)."""
  config = config_lib.with_model(config_lib.get_config(), architecture).model.to_dict()
  config['transformer']['num_layers'] = 1
  size = 2 * config['patches']['size'][0]
  model = models.get_model(config, num_classes=0)
  params = model.init(jax.random.key(0), jnp.zeros((1, size, size, 3)), train=False)['params']
  timm_export.export(jax.device_get(params), config, folder, num_classes=0, image_size=size,
                     mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


def place_published(command, work):
  """`--checkpoint=NAME` of a tool → a small published-format file in the cache."""
  match = re.search(r'--checkpoint=(\S+)', command)
  if not match or os.path.exists(work / match[1]) or match[1].startswith('runs/'):
    return
  if match[1].startswith('hub/'):  # A downloaded hub folder: a tiny one of its architecture.
    write_timm_folder(str(work / match[1]))
    return
  path = store.locate(match[1]).path
  if store.is_remote(path):
    model = config_lib.finetune_config('ViT-B_16', 'cifar10', runlocal=True).model
    write_npz(model, store.cache_path(path, str(work / 'cache')), 1000, 32)


def command_env(work):
  """The environment every command runs in (before its own VAR=value prefixes)."""
  env = dict(os.environ, VIT_JAX_CACHE=str(work / 'cache'), JAX_PLATFORMS='cpu',
             VIT_JAX_HUGEPAGES='0', TF_CPP_MIN_LOG_LEVEL='2')
  env['XLA_FLAGS'] = forked.COMPILE_FLAGS  # The suite's only: one device, as a user's run.
  env['PYTHONPATH'] = os.pathsep.join(filter(None, [ROOT, env.get('PYTHONPATH')]))
  return env


def run(command, work, timeout=600):
  """Runs `command` in `work` (TFDS mocked for modules; VAR=value prefixes set in its env)."""
  env = command_env(work)
  words = shlex.split(command)
  while '=' in words[0]:
    name, value = words.pop(0).split('=', 1)
    env[name] = value
  if words[1] == '-m':
    args = [os.path.join(ROOT, 'tests', 'mocked_run.py'), words[2], *words[3:]]
  else:
    args = [os.path.join(ROOT, words[1]), *words[2:]]
  # Forked after the heavy imports, as the study runner's runs are (they start as they would).
  proc = forked.run(args, cwd=work, env=env, timeout=timeout, fork_children=True)
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


def test_readme_uses_one_environment_after_its_set_up():
  """Set-up makes .venv; the README activates it once, then every command is a bare python/pip.

  A bare `python` before the activation (or a `.venv/bin/python` beside bare ones) is what
  failed with "No module named vit_jax" for a user following the page.
  """
  with open(os.path.join(ROOT, 'README.md')) as f:
    blocks = re.findall(r'```(?:bash|sh)\n(.*?)```', f.read(), re.S)
  lines = [line.split('  #')[0].strip() for block in blocks for line in block.splitlines()]
  activate = lines.index('source .venv/bin/activate')
  assert any('scripts/' in line for line in lines[:activate]), lines[:activate]
  uses = [i for i, line in enumerate(lines) if re.search(r'(^|&& )(python|pip) ', line)]
  assert uses and min(uses) > activate, [lines[i] for i in uses]
  assert not [line for line in lines if re.search(r'\.venv/bin/(python|pip)', line)]


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
  held_out = len(folder_source.folder_split(str(root), CLASSES, folder_source.HELD_OUT_SPLIT)[0])
  assert counted == (9 if layout != 'train_only' else held_out) and counted > 0


def run_documented(command, work):
  """Runs a documented command (shrunk) in `work`, after the documented run it starts from.

  A fine-tuning command from `runs/NAME` needs the command with `--workdir=runs/NAME` run
  first; with two test workers that one may have run in the other worker's directory.
  """
  start = re.search(r'--config\.pretrained_path=(runs/[^\s/]+)', command)
  if start and not (work / start[1]).exists():
    run_documented(next(c for c in DOCUMENTED if f'--workdir={start[1]}' in c.split()), work)
  local = substitute(with_runlocal(command), work)
  if '--config=' in local:
    place_pretrained(local, work)
  place_published(local, work)
  return run(local, work)


@pytest.mark.parametrize('command', DOCUMENTED)
def test_documented_command_runs(command, scratch, quickstart_run):
  assert os.path.isfile(quickstart_run / 'params.npz')
  out = run_documented(command, scratch)
  check_curves_end_at_the_recorded_accuracy(command, scratch)
  if 'vit_jax.predict' in command and 'runs/quickstart' in command:
    assert any(name in out for name in ('T-shirt/top', 'Trouser', 'Ankle boot')), out
  if 'vit_jax.analyze' in command:
    assert glob.glob(str(scratch / 'figures' / '*.png'))


def test_the_doc_pages_have_commands():
  """The page reader finds what the pages show (a reader that finds nothing checks nothing)."""
  pages = {os.path.basename(p): page_commands(p) for p in DOC_PAGES}
  assert any('benchmarks/vs_timm.py' in c for c in pages['performance.md'])
  assert any('vit_jax.analyze' in c for c in pages['analysis.md'])
  assert any('benchmarks/folder_startup.py' in c for c in pages['input_pipeline.md'])
  # Each doc command runs, or the same module and config[:arg] runs in another documented
  # command, or NOT_RUN says why; its flags are checked in every case.
  ran = {runs_what(c) for c in DOCUMENTED + DOC_RUN}
  assert all(not_run_reason(c) or runs_what(c) in ran for c in DOC_DOCUMENTED)
  assert any('folder_startup' in c for c in DOC_RUN), DOC_RUN


_HELP = {}


def known_flags(target):
  """Flag names `target` (a vit_jax module or a benchmarks/ script) prints for --helpfull."""
  if target not in _HELP:
    argv = [os.path.join(ROOT, target)] if target.endswith('.py') else ['-m', target]
    env = dict(os.environ, JAX_PLATFORMS='cpu', VIT_JAX_HUGEPAGES='0',
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get('PYTHONPATH')])))
    proc = subprocess.run([sys.executable, *argv, '--helpfull'], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    _HELP[target] = set(re.findall(r'--(?:\[no\])?([\w-]+)', proc.stdout + proc.stderr))
    assert _HELP[target], f'{target} does not exist or prints no flags:\n{proc.stderr[-1500:]}'
  return _HELP[target]


def check_config_fields(command):
  """`--config=FILE[:ARG]` loads, and each `--config.a.b=...` names a field it has."""
  args = [a.strip('[]') for a in shlex.split(command)]
  spec = next((a.split('=', 1)[1] for a in args if a.startswith('--config=')), None)
  if spec is None or not os.path.isfile(os.path.join(ROOT, spec.partition(':')[0])):
    return
  path, _, arg = spec.partition(':')
  config = load_config(os.path.join(ROOT, path))[0].get_config(arg)
  for a in args:
    if a.startswith('--config.'):
      node = config
      for part in a[len('--config.'):].split('=')[0].split('.'):
        assert part in node, f'{command}: {path} has no field {a.split("=")[0]}'
        node = node[part]


@pytest.mark.parametrize('command', DOC_DOCUMENTED)
def test_doc_command_flags_exist(command):
  words = [w for w in shlex.split(command) if '=' not in w or w.startswith('-')]
  flags = known_flags(runs_what(command)[0])
  for word in words:
    name = word.strip('[]').lstrip('-').split('=')[0]
    if word.strip('[').startswith('--') and not name.startswith('config.'):
      assert name in flags or name.removeprefix('no') in flags, f'{command}: no --{name}'
  check_config_fields(command)
  grid = re.search(r'--grid=(\S+)', command)
  if grid:  # The grid file and its arg (e.g. seeded=data+remedies) are valid.
    assert grid_lib.load_grid(os.path.join(ROOT, grid[1])).runs


@pytest.mark.parametrize('command', DOC_RUN)
def test_doc_command_runs(command, scratch):
  """The docs' commands that are not records or benchmarks run as printed, shrunk."""
  local = substitute(with_runlocal(command), scratch).replace('/tmp/data_1m', 'data/my_images')
  if '--config=' in local:
    place_pretrained(local, scratch)
  place_published(local, scratch)  # A tool's --checkpoint=ViT-B_16 (docs/fewshot.md).
  run(local, scratch)
  check_curves_end_at_the_recorded_accuracy(command, scratch)


def check_curves_end_at_the_recorded_accuracy(command, work):
  """After a study grid's run: each run's validation curve (its metrics.jsonl, drawn and read
  for budgets) ends at the step and the validation accuracy its tables report (metadata.json)."""
  results = re.search(r'--results=(\S+)', command)
  if 'research.small_data' not in command or not results or '--report' in command:
    return
  finished = [r for r in records.read_results(str(work / results[1])).values() if r['finished']]
  curves = [r for r in finished if r.get('val_curve')]
  assert curves, f'{results}: no finished run has a validation curve'
  for record in curves:
    assert record['val_curve'][-1] == [record['steps'], round(record['accuracy_val'], 6)], record


def test_the_readmes_test_command_is_what_ci_runs():
  """README's `python -m pytest ...` line is `.ci/run`'s, flags included."""
  with open(os.path.join(ROOT, 'README.md')) as f:
    readme = re.findall(r'python -m pytest [^#\n]*', f.read())
  with open(os.path.join(ROOT, '.ci', 'run')) as f:
    ci = re.findall(r'^\.venv/bin/(python -m pytest .*)$', f.read(), re.M)
  assert len(ci) == 1 and [c.strip() for c in readme] == ci, (readme, ci)
  assert '--durations=' in ci[0]  # CI logs name the slowest tests.
