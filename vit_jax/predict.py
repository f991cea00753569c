"""`python -m vit_jax.predict`: the command lives in vit_jax/tools/predict.py."""

import sys

from vit_jax.tools import predict

if __name__ == '__main__':
  sys.exit(predict.main())
