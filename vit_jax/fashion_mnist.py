"""`python -m vit_jax.fashion_mnist`: the command lives in vit_jax/data/fashion_mnist.py."""

import sys

from vit_jax.data import fashion_mnist

if __name__ == '__main__':
  sys.exit(fashion_mnist.main())
