"""`python -m vit_jax.analyze`: the command lives in vit_jax/tools/analyze.py."""

import sys

from vit_jax.tools import analyze

if __name__ == '__main__':
  sys.exit(analyze.main())
