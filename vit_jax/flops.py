"""`python -m vit_jax.flops`: the command lives in vit_jax/tools/flops.py."""

import sys

from vit_jax.tools import flops

if __name__ == '__main__':
  sys.exit(flops.main())
