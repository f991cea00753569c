"""`python -m vit_jax.flops`: runs vit_jax/tools/flops.py (its flags, its help)."""

from absl import flags

from vit_jax.tools import cli
from vit_jax.tools import flops

flags.adopt_module_key_flags(flops)  # `--help` lists the tool's flags.

if __name__ == '__main__':
  __doc__ = flops.__doc__  # absl's `--help` prints the main module's docstring.
  cli.run(flops)
