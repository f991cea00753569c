"""`python -m vit_jax.export_timm`: runs vit_jax/tools/export_timm.py (its flags, its help)."""

from absl import flags

from vit_jax.tools import cli
from vit_jax.tools import export_timm

flags.adopt_module_key_flags(export_timm)  # `--help` lists the tool's flags.

if __name__ == '__main__':
  __doc__ = export_timm.__doc__  # absl's `--help` prints the main module's docstring.
  cli.run(export_timm)
