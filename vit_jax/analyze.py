"""`python -m vit_jax.analyze`: runs vit_jax/tools/analyze.py (its flags, its help)."""

from absl import flags

from vit_jax.tools import cli
from vit_jax.tools import analyze

flags.adopt_module_key_flags(analyze)  # `--help` lists the tool's flags.

if __name__ == '__main__':
  __doc__ = analyze.__doc__  # absl's `--help` prints the main module's docstring.
  cli.run(analyze)
