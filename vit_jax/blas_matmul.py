"""Float32 matmuls through OpenBLAS on CPU (an XLA FFI call); XLA's own dot everywhere else.

Why: on this project's x86 CPUs XLA's dot reaches ~0.7x of OpenBLAS and of PyTorch's MKL on
ViT shapes (docs/performance.md), and the dense layers are most of a ViT's work. The handler
(csrc/blas_gemm.cc) reads and writes XLA's buffers in place, so unlike `jax.pure_callback`
nothing is copied. It is compiled on first use with the system C++ compiler against jaxlib's
FFI headers and the `scipy-openblas32` wheel, and cached (VIT_JAX_CACHE, default
~/.cache/vit_jax). On GPU/TPU, and for other dtypes, `dot_general` is `lax.dot_general`.
"""

import ctypes
import functools
import hashlib
import importlib.metadata
import math
import os
import pathlib
import shutil
import subprocess
import tempfile
from typing import Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
from jax import lax

TARGET = 'vit_jax_blas_gemm'
SOURCE = pathlib.Path(__file__).parent / 'csrc' / 'blas_gemm.cc'


class BlasUnavailableError(RuntimeError):
  """matmul_impl='blas' was asked for on CPU, but the handler cannot be built or loaded."""


def cache_dir() -> pathlib.Path:
  return pathlib.Path(os.environ.get('VIT_JAX_CACHE', pathlib.Path.home() / '.cache/vit_jax'))


def _openblas():
  try:
    import scipy_openblas32  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise BlasUnavailableError(
        "matmul_impl='blas' needs OpenBLAS: `pip install scipy-openblas32` (or use "
        "matmul_impl='xla')") from e
  return scipy_openblas32


def compile_command(output: str) -> list:
  """The compiler call that builds the handler (the library path is baked in as rpath)."""
  blas = _openblas()
  compiler = os.environ.get('CXX', 'g++')
  return [compiler, '-O2', '-std=c++17', '-shared', '-fPIC', '-w',
          f'-I{jax.ffi.include_dir()}', f'-I{blas.get_include_dir()}', str(SOURCE),
          f'-L{blas.get_lib_dir()}', f'-l{blas.get_library()}',
          f'-Wl,-rpath,{blas.get_lib_dir()}', '-o', output]


def library_path() -> pathlib.Path:
  """Where the built handler lives: keyed by its source, jaxlib and OpenBLAS versions."""
  key = hashlib.sha256(SOURCE.read_bytes())
  for package in ('jaxlib', 'scipy-openblas32'):
    key.update(importlib.metadata.version(package).encode())
  key.update(_openblas().get_lib_dir().encode())
  return cache_dir() / f'blas_gemm-{key.hexdigest()[:16]}.so'


def build() -> pathlib.Path:
  """Compiles the handler unless it is cached; atomic, so parallel processes are safe."""
  path = library_path()
  if path.exists():
    return path
  command = compile_command('OUTPUT')
  if shutil.which(command[0]) is None:
    raise BlasUnavailableError(
        f"matmul_impl='blas' needs a C++ compiler to build {SOURCE.name}: install g++ "
        "(Debian: apt-get install g++) or set CXX, or use matmul_impl='xla'")
  path.parent.mkdir(parents=True, exist_ok=True)
  with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
    output = os.path.join(tmp, path.name)
    result = subprocess.run(compile_command(output), capture_output=True, text=True)
    if result.returncode:
      last = (result.stderr.strip().splitlines() or ['no output'])[-1]
      raise BlasUnavailableError(f'building {SOURCE.name} failed ({last}); use '
                                 "matmul_impl='xla'")
    os.replace(output, path)
  return path


@functools.cache
def register() -> None:
  """Builds (once) and registers the FFI target for the CPU platform in this process."""
  library = ctypes.cdll.LoadLibrary(str(build()))
  jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(library.BlasGemm), platform='cpu')


def _gemm(a: jax.Array, b: jax.Array, trans_a: bool, trans_b: bool) -> jax.Array:
  """op(a) @ op(b) for float32 matrices or stacks of them, by one FFI call.

  op transposes the last two axes where asked; 3-D operands share their leading (batch) axis.
  """
  register()
  batched = a.ndim == 3
  if not batched:
    a, b = a[None], b[None]
  m = a.shape[2] if trans_a else a.shape[1]
  n = b.shape[1] if trans_b else b.shape[2]
  call = jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct((a.shape[0], m, n), jnp.float32),
                          vmap_method='sequential')
  out = call(a, b, trans_a=trans_a, trans_b=trans_b)
  return out if batched else out[0]


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def matmul(a: jax.Array, b: jax.Array, trans_a: bool = False,
           trans_b: bool = False) -> jax.Array:
  """Differentiable op(a) @ op(b), float32, 2-D or 3-D (batched): the backward is BLAS too."""
  return _gemm(a, b, trans_a, trans_b)


def _matmul_forward(a, b, trans_a, trans_b):
  # `matmul`, not `_gemm`: keeps the forward differentiable for gradients of gradients.
  return matmul(a, b, trans_a, trans_b), (a, b)


def _matmul_backward(trans_a, trans_b, residuals, g):
  a, b = residuals
  grad_a = matmul(b, g, trans_b, True) if trans_a else matmul(g, b, False, not trans_b)
  grad_b = matmul(g, a, True, trans_a) if trans_b else matmul(a, g, not trans_a, False)
  return grad_a, grad_b


matmul.defvjp(_matmul_forward, _matmul_backward)


def _is_plain_contraction(lhs_ndim: int, dimension_numbers) -> Optional[int]:
  """Number of contracted dims if they are lhs's last ones against rhs's first ones, in order."""
  (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
  count = len(lhs_contract)
  if lhs_batch or rhs_batch or count == 0 or len(rhs_contract) != count:
    return None
  if tuple(lhs_contract) != tuple(range(lhs_ndim - count, lhs_ndim)):
    return None
  if tuple(rhs_contract) != tuple(range(count)):
    return None
  return count


def dot_general(lhs: jax.Array, rhs: jax.Array,
                dimension_numbers: Tuple[Tuple[Sequence[int], Sequence[int]],
                                         Tuple[Sequence[int], Sequence[int]]],
                precision=None, preferred_element_type=None, **kwargs) -> jax.Array:
  """`lax.dot_general` with the dense-layer case (no batch dims) sent to OpenBLAS on CPU.

  Drop-in for Flax's `dot_general` arguments (nn.Dense, nn.DenseGeneral, attention). Anything
  else (other backends, dtypes or contraction layouts) is `lax.dot_general` unchanged.
  """
  count = _is_plain_contraction(lhs.ndim, dimension_numbers)
  if (count is None or kwargs or not _use_blas(lhs, rhs)
      or preferred_element_type not in (None, jnp.float32)):
    return lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                           preferred_element_type=preferred_element_type, **kwargs)
  free_lhs, free_rhs = lhs.shape[:lhs.ndim - count], rhs.shape[count:]
  contracted = math.prod(rhs.shape[:count])
  a = lhs.reshape(math.prod(free_lhs), contracted)
  b = rhs.reshape(contracted, math.prod(free_rhs))
  return matmul(a, b).reshape(*free_lhs, *free_rhs)


def _use_blas(*operands: jax.Array) -> bool:
  return jax.default_backend() == 'cpu' and all(x.dtype == jnp.float32 for x in operands)


def batched_matmul(a: jax.Array, b: jax.Array, trans_b: bool = False) -> jax.Array:
  """`a @ b` (or `a @ swapaxes(b, -1, -2)`) over equal leading axes, as in attention.

  OpenBLAS on CPU for float32 (each matrix of the stack is one block of work); `jnp.matmul`
  otherwise.
  """
  if not _use_blas(a, b) or a.shape[:-2] != b.shape[:-2]:
    return jnp.matmul(a, jnp.swapaxes(b, -1, -2) if trans_b else b)
  lead = a.shape[:-2]
  out = matmul(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]), False, trans_b)
  return out.reshape(*lead, *out.shape[-2:])
