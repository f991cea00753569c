"""Every data file the package reads at run time ships in its wheel (setup.py's package_data).

An editable install (scripts/setup.sh) reads files from the source tree, so a data file missing
from package_data passes every other test and fails only for a user who `pip install`s the
package: the label lists of tools/predict.py and timm's architecture table are such files.
"""

import ast
import fnmatch
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, 'vit_jax')


def declared_package_data():
  """setup.py's `package_data`, read from its source (running setup.py would build)."""
  with open(os.path.join(ROOT, 'setup.py'), encoding='utf-8') as f:
    tree = ast.parse(f.read())
  for node in ast.walk(tree):
    if isinstance(node, ast.keyword) and node.arg == 'package_data':
      return ast.literal_eval(node.value)
  raise AssertionError('setup.py declares no package_data')


def data_files():
  """Files under vit_jax/ that are not Python (relative to vit_jax/, '/'-separated)."""
  found = []
  for directory, subdirs, files in os.walk(PACKAGE):
    subdirs[:] = [d for d in subdirs if d != '__pycache__']
    for name in files:
      if not name.endswith(('.py', '.pyc')):
        found.append(os.path.relpath(os.path.join(directory, name), PACKAGE).replace(os.sep, '/'))
  return sorted(found)


def test_every_data_file_is_declared():
  patterns = declared_package_data()['vit_jax']
  files = data_files()
  assert 'weights/timm/architectures.json' in files and 'labels/imagenet1k.txt' in files
  missing = [f for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns)]
  assert not missing, f'add to setup.py package_data: {missing}'
