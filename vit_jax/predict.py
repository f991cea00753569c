"""`python -m vit_jax.predict`: runs vit_jax/tools/predict.py (its flags, its help)."""

from absl import flags

from vit_jax.tools import cli
from vit_jax.tools import predict

flags.adopt_module_key_flags(predict)  # `--help` lists the tool's flags.

if __name__ == '__main__':
  __doc__ = predict.__doc__  # absl's `--help` prints the main module's docstring.
  cli.run(predict)
