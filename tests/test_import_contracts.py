"""The import contracts of .importlinter (docs/architecture.md) hold, and each one can fail.

`lint-imports` runs in CI; here each contract is shown to catch the import it forbids, planted
in a copy of the package, so a contract that no longer checks anything fails this test.
"""

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINT_IMPORTS = os.path.join(os.path.dirname(sys.executable), 'lint-imports')
PLANTED = {  # contract id: (file, the import planted at its end)
    'layers': ('vit_jax/models_vit.py', 'from vit_jax import train'),
    'research-outside': ('vit_jax/tools/flops.py', 'from research.small_data import grid'),
    'jax-free-configs': ('vit_jax/presets.py', 'import jax'),
    'models-without-tf': ('vit_jax/ops.py', 'import tensorflow'),
    'no-test-extras': ('vit_jax/weights/timm/files.py', 'import torch'),
    'tools-independent': ('vit_jax/tools/analyze.py', 'from vit_jax.tools import predict'),
    'family-folder': ('vit_jax/families/swin/timm.py', 'from vit_jax.families.swin import shapes'),
    'family-models': ('vit_jax/families/mixer/model.py', 'from vit_jax.weights import store'),
    'family-readers': ('vit_jax/families/vit/flops.py', 'from vit_jax.training import optim'),
}


@pytest.fixture(scope='module')
def tree(tmp_path_factory):
  """A copy of what lint-imports reads: the packages and the contracts."""
  root = tmp_path_factory.mktemp('lint')
  for package in ('vit_jax', 'research'):
    shutil.copytree(os.path.join(ROOT, package), root / package,
                    ignore=shutil.ignore_patterns('__pycache__', '*.txt'))
  shutil.copy(os.path.join(ROOT, '.importlinter'), root)
  return root


def lint(root, contract=None):
  args = [LINT_IMPORTS, '--no-cache'] + (['--contract', contract] if contract else [])
  return subprocess.run(args, cwd=root, capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, PYTHONPATH=str(root)))


def lint_with_planted(root, path, line, contract):
  """lint-imports on `contract` with `line` appended to `path`, which is then put back."""
  target = root / path
  original = target.read_text()
  try:
    target.write_text(original + f'\n{line}  # planted by the test\n')
    return lint(root, contract)
  finally:
    target.write_text(original)


def test_every_contract_is_kept_and_each_is_tested_here(tree):
  with open(tree / '.importlinter') as f:
    ids = {line.split(':')[-1].strip(' ]\n') for line in f
           if line.startswith('[importlinter:contract:')}
  assert ids == set(PLANTED)
  result = lint(tree)
  assert result.returncode == 0, result.stdout[-2000:]


@pytest.mark.parametrize('contract', sorted(PLANTED))
def test_a_planted_import_breaks_its_contract(tree, contract):
  path, line = PLANTED[contract]
  result = lint_with_planted(tree, path, line, contract)
  assert result.returncode == 1, result.stdout[-2000:]
  assert 'BROKEN' in result.stdout and line.split()[-1] in result.stdout


def test_a_family_record_that_imports_jax_breaks_the_jax_free_contract(tree):
  """The records are data that presets and configs read: the contract covers every family's
  `__init__.py` (a wildcard, so a new folder is covered without naming it)."""
  result = lint_with_planted(tree, 'vit_jax/families/hybrid/__init__.py', 'import flax',
                             'jax-free-configs')
  assert result.returncode == 1 and 'vit_jax.families.hybrid' in result.stdout, (
      result.stdout[-2000:])


def test_the_weights_package_cannot_import_the_official_checkpoint_api(tree):
  """`checkpoint.py` (the official API) sits above `weights/`: an import back up, as
  `loading` once had, breaks the layers (they used to share a layer, which hid it)."""
  result = lint_with_planted(tree, 'vit_jax/weights/loading.py',
                             'from vit_jax import checkpoint', 'layers')
  assert result.returncode == 1 and 'vit_jax.checkpoint' in result.stdout, result.stdout[-2000:]


def test_no_layer_holds_two_modules_that_may_import_each_other(tree):
  """A layer of several modules declares them independent (`|`), so none can hide an import
  back up (as `checkpoint : checkpoints` once did); planting one breaks the layers."""
  with open(tree / '.importlinter') as f:
    layers = f.read().split('layers =')[1].split('exhaustive')[0].split('\n')
  assert not [layer for layer in layers if ':' in layer], 'use "|" or separate layers'
  result = lint_with_planted(tree, 'vit_jax/models_mixer.py', 'from vit_jax import models_swin',
                             'layers')
  assert result.returncode == 1 and 'vit_jax.models_swin' in result.stdout, result.stdout[-2000:]
