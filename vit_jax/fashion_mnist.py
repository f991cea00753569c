"""Prepares TFDS fashion_mnist from local idx files, for machines that cannot download it.

  python -m vit_jax.fashion_mnist [--data_dir=TFDS_DATA_DIR] [--source_dir=IDX_DIR]

The command and its flags live here, at the entry point: importing the input pipeline (which
registers `data.fashion_mnist`'s local preparer) defines no global flags.
"""

import sys
from typing import Sequence

from absl import flags

from vit_jax.data import fashion_mnist
from vit_jax.tools import cli

_DATA_DIR = flags.DEFINE_string('data_dir', None, 'TFDS data dir (default: TFDS default).')
_SOURCE_DIR = flags.DEFINE_string(
    'source_dir', None, f'idx files (default: ${fashion_mnist.SOURCE_DIR_ENV} or '
    f'{fashion_mnist.DEFAULT_SOURCE_DIR}).')


def main(argv: Sequence[str]) -> str:
  """`python -m vit_jax.fashion_mnist`: prepares the TFDS copy and says where.

  Run through `vit_jax.tools.cli` as the tools are: a ValueError becomes one line and exit 1.
  """
  if len(argv) > 1:
    raise ValueError(f'Unexpected arguments: {" ".join(argv[1:])}; the command takes only '
                     '--data_dir and --source_dir.')
  fashion_mnist.prepare(_DATA_DIR.value, _SOURCE_DIR.value)
  return f'fashion_mnist is prepared in {_DATA_DIR.value or "the TFDS default data dir"}.'


if __name__ == '__main__':
  cli.run(sys.modules[__name__])
