"""Importing the package has no side effects: no TFDS, no flags, no files, no environment."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What a user imports to load, predict, analyze or train; TFDS is imported when a TFDS dataset
# is opened, by `input_pipeline` (and by the Fashion-MNIST preparation command), not before.
MODULES = ('vit_jax.checkpoint', 'vit_jax.models', 'vit_jax.predict', 'vit_jax.analyze',
           'vit_jax.features', 'vit_jax.flops', 'vit_jax.export_timm', 'vit_jax.input_pipeline',
           'vit_jax.train', 'vit_jax.main', 'vit_jax.weights.loading',
           'vit_jax.training.from_checkpoint')
# The modules imported one after another in one fresh process started in an empty directory
# with an empty HOME, reporting after each what it changed: TFDS loaded, environment variables,
# files written, flags vit_jax defines (absl's logging flags, TensorFlow's own variables and
# files are there before, as in any program). One process, not one per module (a dozen
# interpreters importing TensorFlow cost minutes of CI): what a module changes shows at its own
# import or, for a module another one imported first, at that one's, and TFDS must never load,
# so nothing is missed. The modules that may define flags come last.
PROBE = '''
import importlib, json, os, sys
from absl import flags, logging
import tensorflow  # TensorFlow sets its own variables (TF2_BEHAVIOR, ...) when imported.
def files():
  return {os.path.join(d, f) for top in ('.', os.environ['HOME']) for d, _, fs in os.walk(top)
          for f in fs}
for module in sys.argv[1:]:
  before_env, before_files = dict(os.environ), files()
  importlib.import_module(module)
  print(json.dumps(dict(
      module=module, tfds='tensorflow_datasets' in sys.modules,
      env=sorted(k for k in set(os.environ) | set(before_env)
                 if os.environ.get(k) != before_env.get(k)),
      written=sorted(files() - before_files), flags=sorted(
          f.name for m, fs in flags.FLAGS.flags_by_module_dict().items()
          if m.startswith('vit_jax') for f in fs))), flush=True)
'''
# The command-line entry points define their own flags when imported (absl's way).
COMMANDS = ('vit_jax.predict', 'vit_jax.analyze', 'vit_jax.features', 'vit_jax.flops',
            'vit_jax.export_timm', 'vit_jax.main')


@pytest.fixture(scope='module')
def imported(tmp_path_factory):
  """{module: what importing it changed}, the modules without flags first."""
  tmp = tmp_path_factory.mktemp('imports')
  (tmp / 'home').mkdir()
  (tmp / 'cwd').mkdir()
  order = [m for m in MODULES if m not in COMMANDS] + [m for m in MODULES if m in COMMANDS]
  env = dict(os.environ, PYTHONPATH=ROOT, HOME=str(tmp / 'home'))
  done = subprocess.run([sys.executable, '-c', PROBE, *order], cwd=tmp / 'cwd', env=env,
                        capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-2000:]
  lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{')]
  assert [found['module'] for found in lines] == order
  return {found['module']: found for found in lines}


@pytest.mark.parametrize('module', MODULES)
def test_importing_changes_nothing_and_imports_no_tfds(module, imported):
  found = imported[module]
  assert not found['tfds'], f'{module} (or a module imported before it) imports tensorflow_datasets'
  assert found['env'] == [] and found['written'] == []
  if module not in COMMANDS:  # Imported before every command: any flag is one of theirs.
    assert found['flags'] == [], f'{module} defines flags {found["flags"]}'
