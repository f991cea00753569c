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
# Importing one module in a fresh process from an empty directory and HOME, then reporting
# what it changed: modules loaded, environment variables, files written, flags vit_jax defines
# (absl's logging flags, TensorFlow's own variables and files are there before, as in any
# program).
PROBE = '''
import json, os, sys
from absl import flags, logging
import tensorflow  # TensorFlow sets its own variables (TF2_BEHAVIOR, ...) when imported.
def files():
  return {os.path.join(d, f) for top in ('.', os.environ['HOME']) for d, _, fs in os.walk(top)
          for f in fs}
before_env, before_files = dict(os.environ), files()
import importlib
importlib.import_module(sys.argv[1])
written = sorted(files() - before_files)
print(json.dumps(dict(
    tfds='tensorflow_datasets' in sys.modules,
    env=sorted(k for k in set(os.environ) | set(before_env)
               if os.environ.get(k) != before_env.get(k)),
    written=written, flags=sorted(
        f.name for m, fs in flags.FLAGS.flags_by_module_dict().items()
        if m.startswith('vit_jax') for f in fs))))
'''
# The command-line entry points define their own flags when imported (absl's way).
COMMANDS = ('vit_jax.predict', 'vit_jax.analyze', 'vit_jax.features', 'vit_jax.flops',
            'vit_jax.export_timm', 'vit_jax.main')


@pytest.mark.parametrize('module', MODULES)
def test_importing_changes_nothing_and_imports_no_tfds(module, tmp_path):
  (tmp_path / 'home').mkdir()
  (tmp_path / 'cwd').mkdir()
  env = dict(os.environ, PYTHONPATH=ROOT, HOME=str(tmp_path / 'home'))
  done = subprocess.run([sys.executable, '-c', PROBE, module], cwd=tmp_path / 'cwd', env=env,
                        capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-2000:]
  found = json.loads(done.stdout.strip().splitlines()[-1])
  assert not found['tfds'], f'{module} imports tensorflow_datasets'
  assert found['env'] == [] and found['written'] == []
  if module not in COMMANDS:
    assert found['flags'] == [], f'{module} defines flags {found["flags"]}'
