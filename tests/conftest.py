"""Shared pytest setup: JAX on CPU, and small helpers for the test files."""

import atexit
import os
import shutil
import tempfile

# Before any test module imports jax: tests never need an accelerator.
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
# As in Flax's examples/imagenet tests: small test programs, so compile time dominates.
os.environ.setdefault('JAX_DISABLE_MOST_OPTIMIZATIONS', '1')
# One XLA compilation cache for the session, shared by the test processes and the training runs
# they start (the same tiny models compile again and again): a quarter less time on
# test_main.py + test_train.py. Executables are keyed by program and compile options, so a hit
# runs the same program. Removed when the process that made it exits.
if 'JAX_COMPILATION_CACHE_DIR' not in os.environ:
  os.environ['JAX_COMPILATION_CACHE_DIR'] = tempfile.mkdtemp(prefix='vit_jax_tests_xla_cache_')
  atexit.register(shutil.rmtree, os.environ['JAX_COMPILATION_CACHE_DIR'], ignore_errors=True)
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES', '0')
# The suite's XLA flags (tests/forked.py: faster compiles), for this process and the commands
# the tests start (they read XLA_FLAGS when JAX starts its backend).
import forked  # noqa: E402  # After the variables above; it imports no JAX.
if forked.COMPILE_FLAGS not in os.environ.get('XLA_FLAGS', ''):
  os.environ['XLA_FLAGS'] = ' '.join(filter(None, [os.environ.get('XLA_FLAGS'),
                                                   forked.COMPILE_FLAGS]))
# The training runs tests start as subprocesses get what scripts/hugepages.sh gives a user's run
# (transparent huge pages for malloc): XLA:CPU steps fault fewer pages, so they finish sooner.
if 'glibc.malloc.hugetlb=' not in os.environ.get('GLIBC_TUNABLES', ''):
  os.environ['GLIBC_TUNABLES'] = ':'.join(
      filter(None, [os.environ.get('GLIBC_TUNABLES'), 'glibc.malloc.hugetlb=1']))

# triton (loaded by timm through torch) segfaults when its C extension loads after TensorFlow's
# (the input pipeline's): seen with torch 2.14.1 / triton 3.8.0 / tensorflow-cpu 2.21. Loaded
# first, both work; test files import timm after other files have imported TensorFlow.
try:
  import triton  # noqa: E402, F401
except ImportError:
  pass
import jax  # noqa: E402

# Multi-device code paths everywhere: 4 CPU devices (tests/test_distributed.py relies on it).
jax.config.update('jax_num_cpu_devices', 4)
import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def download_cache(tmp_path, monkeypatch):
  """Each test downloads into its own folder, never the clone's checkpoints/ or ~/.cache."""
  monkeypatch.setenv('VIT_JAX_CACHE', str(tmp_path / 'vit_jax_cache'))
  return tmp_path / 'vit_jax_cache'


@pytest.fixture
def rng():
  """A fixed `jax.random.key(0)`."""
  return jax.random.key(0)


@pytest.fixture
def mock_cifar10():
  """TFDS's own mock data (10 examples a split) in place of CIFAR-10: no download."""
  import tensorflow_datasets as tfds  # noqa: PLC0415  # Only the data tests need TensorFlow.
  with tfds.testing.mock_data(num_examples=10):
    yield


@pytest.fixture
def np_rng():
  """A seeded NumPy generator."""
  return np.random.default_rng(0)


def pytest_configure(config):
  config.addinivalue_line('markers', 'slow: launches subprocesses (multi-process training)')
