"""`python -m vit_jax.fewshot`: runs vit_jax/tools/fewshot.py (its flags, its help)."""

from absl import flags

from vit_jax.tools import cli
from vit_jax.tools import fewshot

flags.adopt_module_key_flags(fewshot)  # `--help` lists the tool's flags.

if __name__ == '__main__':
  __doc__ = fewshot.__doc__  # absl's `--help` prints the main module's docstring.
  cli.run(fewshot)
