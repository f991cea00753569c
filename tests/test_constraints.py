"""constraints.txt pins every dependency of setup.py, within its floors (scripts/constraints.py)."""

import importlib.util
import os

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script():
  spec = importlib.util.spec_from_file_location('constraints', os.path.join(ROOT, 'scripts',
                                                                            'constraints.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def read_pins():
  with open(os.path.join(ROOT, 'constraints.txt')) as f:
    lines = [line.strip() for line in f if line.strip() and not line.startswith('#')]
  return {canonicalize_name(n): v for n, v in (line.split('==') for line in lines)}


def test_every_requirement_is_pinned_within_its_floor():
  """A dependency added to setup.py without refreshing constraints.txt fails here."""
  pins = read_pins()
  for text in load_script().setup_requirements():
    req = Requirement(text)
    if req.marker and not req.marker.evaluate():
      continue
    name = canonicalize_name(req.name)
    assert name in pins, f'{name} is not in constraints.txt: run scripts/constraints.py'
    assert req.specifier.contains(pins[name], prereleases=True), (name, pins[name], text)


def test_closure_follows_requirements_not_the_venv():
  """Dependencies of dependencies are pinned; packages nothing requires (pip) and the
  machine-specific CUDA wheels are not."""
  script = load_script()
  pins = script.closure(['flax'])
  assert {'flax', 'jax', 'jaxlib', 'optax', 'numpy'} <= set(pins)
  assert 'pip' not in pins and 'tensorflow-datasets' not in pins
  assert not [n for n in read_pins() if n.startswith(script.MACHINE_SPECIFIC)]
