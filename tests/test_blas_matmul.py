"""The OpenBLAS FFI matmul (matmul_impl='blas'): values and gradients against XLA's dot."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from npz_fixtures import images, perturb
from vit_jax import blas_matmul
from vit_jax import models_vit

DENSE = (((2,), (0,)), ((), ()))


def normal(shape, seed=0):
  return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.float32)


def close(a, b, rtol=2e-6):
  """Max abs difference within rtol of the reference's largest entry (sums reorder)."""
  a, b = np.asarray(a), np.asarray(b)
  assert a.shape == b.shape and a.dtype == b.dtype
  np.testing.assert_allclose(a, b, atol=rtol * max(1., np.abs(b).max()), rtol=0)


@pytest.mark.parametrize('trans_a', [False, True])
@pytest.mark.parametrize('trans_b', [False, True])
@pytest.mark.parametrize('m,k,n', [(3, 5, 4), (300, 40, 70), (70, 40, 300), (1, 1, 1)])
def test_matmul_values_and_gradients(trans_a, trans_b, m, k, n):
  """Blocks are cut along the longer side (rows or columns): both ways, with remainders."""
  a = normal((k, m) if trans_a else (m, k), 1)
  b = normal((n, k) if trans_b else (k, n), 2)
  ref = lambda a, b: (a.T if trans_a else a) @ (b.T if trans_b else b)  # noqa: E731
  ours = lambda a, b: blas_matmul.matmul(a, b, trans_a, trans_b)  # noqa: E731
  close(jax.jit(ours)(a, b), ref(a, b))
  loss = lambda f: lambda a, b: jnp.sum(jnp.sin(f(a, b)))  # noqa: E731
  for got, want in zip(jax.grad(loss(ours), (0, 1))(a, b), jax.grad(loss(ref), (0, 1))(a, b)):
    close(got, want)


@pytest.mark.parametrize('trans_b', [False, True])
def test_batched_matmul_values_and_gradients(trans_b):
  """Attention's products: a stack of matrices, one block of work each."""
  a, b = normal((2, 3, 7, 5), 7), normal((2, 3, 6, 5) if trans_b else (2, 3, 5, 6), 8)
  ref = lambda a, b: jnp.matmul(a, jnp.swapaxes(b, -1, -2) if trans_b else b)  # noqa: E731
  ours = lambda a, b: blas_matmul.batched_matmul(a, b, trans_b)  # noqa: E731
  assert blas_matmul.TARGET in str(jax.make_jaxpr(ours)(a, b))
  close(jax.jit(ours)(a, b), ref(a, b))
  loss = lambda f: lambda a, b: jnp.sum(jnp.sin(f(a, b)))  # noqa: E731
  for got, want in zip(jax.grad(loss(ours), (0, 1))(a, b), jax.grad(loss(ref), (0, 1))(a, b)):
    close(got, want)
  bf16 = [t.astype(jnp.bfloat16) for t in (a, b)]  # Other dtypes: jnp.matmul unchanged.
  assert blas_matmul.TARGET not in str(jax.make_jaxpr(ours)(*bf16))


def test_empty_contraction_is_zeros():
  out = blas_matmul.matmul(jnp.ones((3, 0)), jnp.ones((0, 4)))
  np.testing.assert_array_equal(out, np.zeros((3, 4), np.float32))


@pytest.mark.parametrize('lhs_shape,rhs_shape,dims', [
    ((2, 5, 8), (8, 12), DENSE),  # nn.Dense
    ((2, 5, 8), (8, 2, 4), DENSE),  # query/key/value projections
    ((2, 5, 2, 4), (2, 4, 8), (((2, 3), (0, 1)), ((), ()))),  # attention output projection
])
def test_dot_general_matches_lax(lhs_shape, rhs_shape, dims):
  lhs, rhs = normal(lhs_shape, 3), normal(rhs_shape, 4)
  close(blas_matmul.dot_general(lhs, rhs, dims), lax.dot_general(lhs, rhs, dims))

  def loss(fn):
    return lambda x, w: jnp.sum(jnp.tanh(fn(x, w, dims)))

  def grad_of_grad(fn):  # Reverse mode over reverse mode works (no forward mode: FFI).
    return jax.grad(lambda x, w: jnp.sum(jax.grad(loss(fn), 1)(x, w) ** 2))

  for make in (lambda f: jax.grad(loss(f), (0, 1)), grad_of_grad):
    got = jax.jit(make(blas_matmul.dot_general))(lhs, rhs)
    want = make(lax.dot_general)(lhs, rhs)
    jax.tree.map(lambda g, w: close(g, w, rtol=1e-5), got, want)


def test_dot_general_under_vmap():
  lhs, rhs = normal((3, 5, 8), 5), normal((8, 6), 6)
  got = jax.vmap(lambda x: blas_matmul.dot_general(x, rhs, (((1,), (0,)), ((), ()))))(lhs)
  close(got, lax.dot_general(lhs, rhs, DENSE))


@pytest.mark.parametrize('lhs,rhs,dims', [
    (normal((4, 5, 8)), normal((4, 8, 3)), (((2,), (1,)), ((0,), (0,)))),  # batch dims
    (normal((5, 8)), normal((3, 8)), (((1,), (1,)), ((), ()))),  # contracts rhs's last dim
    (normal((5, 8)).astype(jnp.bfloat16), normal((8, 3)).astype(jnp.bfloat16),
     (((1,), (0,)), ((), ()))),  # not float32
])
def test_other_layouts_and_dtypes_are_lax_dot_general(lhs, rhs, dims):
  jaxpr = str(jax.make_jaxpr(lambda a, b: blas_matmul.dot_general(a, b, dims))(lhs, rhs))
  assert 'ffi_call' not in jaxpr and 'dot_general' in jaxpr
  np.testing.assert_array_equal(blas_matmul.dot_general(lhs, rhs, dims),
                                lax.dot_general(lhs, rhs, dims))


def test_dense_layout_calls_the_ffi_target():
  jaxpr = str(jax.make_jaxpr(lambda a, b: blas_matmul.dot_general(a, b, DENSE))(
      normal((2, 5, 8)), normal((8, 3))))
  assert blas_matmul.TARGET in jaxpr and 'dot_general' not in jaxpr


def test_vit_blas_matches_xla_logits_and_gradients():
  """Same param tree; fp32 logits within 2e-5 relative (issue 6's bar), gradients too."""
  x = images(2, 32, 32)
  config = dict(num_classes=5, patches={'size': (8, 8)}, hidden_size=16,
                representation_size=None, attention_impl='heads_first',
                transformer=dict(mlp_dim=32, num_heads=2, num_layers=2,
                                 attention_dropout_rate=0., dropout_rate=0.))
  plain = models_vit.VisionTransformer(**config)
  blas = models_vit.VisionTransformer(**config, matmul_impl='blas')
  key = jax.random.key(0)
  params = perturb(plain.init(key, x, train=False)['params'], scale=0.3)
  assert jax.tree.structure(blas.init(key, x, train=False)['params']) == jax.tree.structure(
      params)
  a = plain.apply({'params': params}, x, train=False)
  forward = lambda p: blas.apply({'params': p}, x, train=False)  # noqa: E731
  # Every encoder matmul (dense layers and both attention products) goes through OpenBLAS;
  # only the head keeps XLA's dot (the embedding is a convolution).
  assert str(jax.make_jaxpr(forward)(params)).count('dot_general') == 1
  b = jax.jit(forward)(params)
  assert np.abs(a - b).max() <= 2e-5 * np.abs(a).max()

  def grads(model):
    return jax.grad(lambda p: jnp.sum(model.apply({'params': p}, x, train=False) ** 2))(params)

  jax.tree.map(lambda g, w: close(g, w, rtol=2e-5), jax.jit(lambda: grads(blas))(), grads(plain))


def test_unknown_matmul_impl_is_a_clear_error():
  with pytest.raises(ValueError, match="matmul_impl"):
    models_vit.VisionTransformer(num_classes=2, patches={'size': (8, 8)}, hidden_size=16,
                                 transformer=None, matmul_impl='mkl')


def test_missing_compiler_is_a_one_line_error(tmp_path, monkeypatch):
  monkeypatch.setenv('VIT_JAX_CACHE', str(tmp_path))
  monkeypatch.setenv('CXX', 'no-such-compiler-vit-jax')
  with pytest.raises(blas_matmul.BlasUnavailableError, match=r"C\+\+ compiler.*'xla'") as info:
    blas_matmul.build()
  assert '\n' not in str(info.value)
  assert not list(tmp_path.iterdir())  # Nothing half-built is left in the cache.


def test_build_is_cached_by_content(tmp_path, monkeypatch):
  monkeypatch.setenv('VIT_JAX_CACHE', str(tmp_path))
  path = blas_matmul.build()
  assert path.parent == tmp_path and path.name.startswith('blas_gemm-')
  mtime = path.stat().st_mtime_ns
  assert blas_matmul.build() == path and path.stat().st_mtime_ns == mtime
  assert [p.name for p in tmp_path.iterdir()] == [path.name]  # No temporary files left.
