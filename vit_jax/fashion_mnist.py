"""Prepares TFDS fashion_mnist from local idx files, for machines that cannot download it.

  python -m vit_jax.fashion_mnist [--data_dir=TFDS_DATA_DIR] [--source_dir=IDX_DIR]

The command lives in vit_jax/data/fashion_mnist.py; this entry point keeps its name.
"""

from absl import flags

from vit_jax.data import fashion_mnist
from vit_jax.tools import cli

flags.adopt_module_key_flags(fashion_mnist)  # `--help` lists the command's flags.

if __name__ == '__main__':
  cli.run(fashion_mnist)
