r"""The hybrid ResNet root: XLA's convolution against `ops.conv_as_matmul`.

Usage:
  python benchmarks/root_conv.py [--batch=128] [--image=56] [--repeats=7]
Times forward + kernel gradient of the 7x7/2 root (3 -> 64 channels) both ways, interleaved in
one process (so machine drift hits both alike), and prints the medians, their ratio and the
largest differences. The root uses `conv_as_matmul` when the backend is CPU.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app
from absl import flags

from vit_jax import ops

_BATCH = flags.DEFINE_integer('batch', 128, 'Images per call.')
_IMAGE = flags.DEFINE_integer('image', 56, 'Square input side in pixels.')
_REPEATS = flags.DEFINE_integer('repeats', 7, 'Timed calls of each way (interleaved).')


def lax_conv(x: jax.Array, kernel: jax.Array, strides) -> jax.Array:
  return jax.lax.conv_general_dilated(x, kernel, strides, 'SAME',
                                      dimension_numbers=('NHWC', 'HWIO', 'NHWC'))


def forward_and_kernel_grad(conv):
  """jit(kernel, x) -> (outputs, d sum(sin(outputs)) / d kernel)."""

  def run(kernel, x):
    out, vjp = jax.vjp(lambda k: conv(x, k, (2, 2)), kernel)
    return out, vjp(jnp.cos(out))[0]

  return jax.jit(run)


def main(argv) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments {argv[1:]}.')
  x = jax.random.normal(jax.random.key(0), (_BATCH.value, _IMAGE.value, _IMAGE.value, 3))
  kernel = jax.random.normal(jax.random.key(1), (7, 7, 3, 64)) * 0.1
  fns = {'lax.conv_general_dilated': forward_and_kernel_grad(lax_conv),
         'conv_as_matmul': forward_and_kernel_grad(ops.conv_as_matmul)}
  results = {name: jax.block_until_ready(fn(kernel, x)) for name, fn in fns.items()}
  times = {name: [] for name in fns}
  for _ in range(_REPEATS.value):
    for name, fn in fns.items():
      start = time.perf_counter()
      jax.block_until_ready(fn(kernel, x))
      times[name].append(time.perf_counter() - start)
  print(f'devices: {jax.devices()}; root 7x7/2 on {x.shape}, forward + kernel gradient')
  for name, ts in times.items():
    print(f'{name:>26s}: median {np.median(ts) * 1e3:8.1f} ms  (min {min(ts) * 1e3:.1f})')
  ratio = np.median(times['lax.conv_general_dilated']) / np.median(times['conv_as_matmul'])
  (out_a, grad_a), (out_b, grad_b) = results.values()
  out_diff = float(jnp.abs(out_a - out_b).max())
  grad_diff = float(jnp.abs(grad_a - grad_b).max() / jnp.abs(grad_a).max())
  print(f'speed-up: {ratio:.2f}x; max |outputs diff| {out_diff:.2e}, '
        f'kernel grad diff / max {grad_diff:.2e}')


if __name__ == '__main__':
  app.run(main)
