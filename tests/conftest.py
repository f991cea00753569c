"""Shared pytest setup: JAX on CPU, and small helpers for the test files."""

import os

# Before any test module imports jax: tests never need an accelerator.
os.environ.setdefault('JAX_PLATFORMS', 'cpu')

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng():
  """A fixed `jax.random.key(0)`."""
  return jax.random.key(0)


@pytest.fixture
def np_rng():
  """A seeded NumPy generator."""
  return np.random.default_rng(0)
