"""What a benchmark worker measures of its own process and device: peak memory, the device's
name, the cores it may use, and each framework's matmul peak (the MFU denominator).

The imports of jax and torch are inside the functions: a worker process imports one framework
only (timm crashes after TensorFlow in the same process, and two allocators would share one
device's memory).
"""

import os
import resource
import time
from typing import Any, Callable, Tuple


def peak_rss_mb() -> float:
  """High-water mark of this process's resident memory (Linux reports KiB)."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def jax_peak_mb() -> float:
  """Peak device allocation on an accelerator, else the process's peak RSS."""
  import jax
  device = jax.local_devices()[0]
  stats = device.memory_stats() if device.platform != 'cpu' else None
  if stats and 'peak_bytes_in_use' in stats:
    return stats['peak_bytes_in_use'] / 2**20
  return peak_rss_mb()


def jax_device() -> str:
  import jax
  device = jax.local_devices()[0]
  return 'cpu' if device.platform == 'cpu' else f'{device.platform}:{device.device_kind}'


def cores() -> int:
  return len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()


def timed(fn) -> Tuple[float, int]:
  """Seconds and minor page faults of one call."""
  faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults


def _matmul_peak(product: Callable[[], Any], n: int, calls: int) -> float:
  """fp32 GFLOP/s of the best of `calls` runs of `product` (an n×n matrix product)."""
  product()  # Warm-up (compiles in JAX).
  return 2 * n**3 / min(timed(product)[0] for _ in range(calls)) / 1e9


def jax_matmul_peak(n: int = 2048, calls: int = 3, dtype: str = 'float32') -> float:
  """GFLOP/s of jitted n×n products in `dtype` on JAX's default device."""
  import jax
  import jax.numpy as jnp
  if jax.default_backend() != 'cpu':
    n, calls = 8192, 10  # Enough work per call to hide launch overhead.
  a = jax.random.normal(jax.random.key(0), (n, n), jnp.dtype(dtype))
  dot = jax.jit(jnp.dot)
  return _matmul_peak(lambda: dot(a, a).block_until_ready(), n, calls)


def torch_device() -> str:
  import torch
  return 'cuda' if torch.cuda.is_available() else 'cpu'


def torch_sync() -> None:
  import torch
  if torch.cuda.is_available():
    torch.cuda.synchronize()


def torch_matmul_peak(n: int = 2048, calls: int = 3, dtype: str = 'float32') -> float:
  """GFLOP/s of torch n×n products in `dtype` on the device timm runs on."""
  import torch
  device = torch_device()
  if device != 'cpu':
    n, calls = 8192, 10
  a = torch.randn(n, n, device=device, dtype=getattr(torch, dtype))

  def product():
    a @ a
    torch_sync()
  return _matmul_peak(product, n, calls)
