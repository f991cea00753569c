"""Prints the pinned versions of vit-jax's dependencies as installed here: constraints.txt.

  .venv/bin/python scripts/constraints.py > constraints.txt

Run it in a venv where the test suite just passed (`bash scripts/setup.sh test`, then the tests).
It walks the requirements of setup.py (install_requires and the test extra) through the
installed packages' own requirements, so only real dependencies are pinned, not whatever else
the venv holds; `scripts/setup.sh` installs with `pip install -c constraints.txt`.
"""

import ast
import datetime
import importlib.metadata
import os
import sys

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETUP_PY = os.path.join(ROOT, 'setup.py')
# CUDA runtime wheels that torch's Linux build pulls in: they depend on the machine's GPU and
# driver, and `jax[cuda12]` brings its own (docs/troubleshooting.md), so they are not pinned.
MACHINE_SPECIFIC = ('nvidia-', 'cuda-', 'triton')


def setup_requirements(path=SETUP_PY):
  """The strings of INSTALL_REQUIRES and TESTS_REQUIRE in setup.py (read, not executed)."""
  with open(path) as f:
    tree = ast.parse(f.read())
  found = {}
  for node in tree.body:
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
      if node.targets[0].id in ('INSTALL_REQUIRES', 'TESTS_REQUIRE'):
        found[node.targets[0].id] = ast.literal_eval(node.value)
  return found['INSTALL_REQUIRES'] + found['TESTS_REQUIRE']


def closure(requirements):
  """{canonical name: installed version} of `requirements` and everything they require."""
  pinned, todo = {}, [(Requirement(r), ()) for r in requirements]
  while todo:
    req, extras = todo.pop()
    if req.marker and not any(req.marker.evaluate({'extra': e}) for e in extras or ('',)):
      continue
    name = canonicalize_name(req.name)
    try:
      dist = importlib.metadata.distribution(req.name)
    except importlib.metadata.PackageNotFoundError:
      sys.exit(f'{req.name} is required but not installed here; run `bash scripts/setup.sh test` '
               'first.')
    wanted = tuple(sorted(req.extras))
    if pinned.get(name, (None, None))[1] is not None and set(wanted) <= set(pinned[name][1]):
      continue
    done = pinned.get(name, (None, ()))[1] or ()
    pinned[name] = (dist.version, tuple(sorted(set(done) | set(wanted))))
    todo += [(Requirement(r), wanted) for r in dist.requires or ()]
  return {name: version for name, (version, _) in pinned.items()}


def main():
  pins = closure(setup_requirements())
  print(f'# vit-jax dependencies as installed when the tests passed ({datetime.date.today()}, '
        f'Python {sys.version_info.major}.{sys.version_info.minor}). Made by '
        'scripts/constraints.py; used by scripts/setup.sh.')
  for name in sorted(pins):
    if name.startswith(MACHINE_SPECIFIC):
      continue
    print(f'{name}=={pins[name]}')


if __name__ == '__main__':
  main()
