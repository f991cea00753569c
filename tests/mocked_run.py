"""Runs `python -m MODULE ARGS` with every TFDS dataset served by `tfds.testing.mock_data`.

  python tests/mocked_run.py vit_jax.main --config=configs/vit_b16_cifar10.py:runlocal

For the documented-commands test: the command runs as printed, without network or real data.
"""

import runpy
import sys

import tensorflow_datasets as tfds

if __name__ == '__main__':
  module, sys.argv = sys.argv[1], [sys.argv[1]] + sys.argv[2:]
  with tfds.testing.mock_data(num_examples=16):
    runpy.run_module(module, run_name='__main__', alter_sys=True)
