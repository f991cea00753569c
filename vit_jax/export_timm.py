"""`python -m vit_jax.export_timm`: the command lives in vit_jax/tools/export_timm.py."""

import sys

from vit_jax.tools import export_timm

if __name__ == '__main__':
  sys.exit(export_timm.main())
