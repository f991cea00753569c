"""Fast paths of the models, kept apart from the architecture files.

Each computes the same values as the plain Flax op it replaces and leaves the parameter tree
unchanged; the model files choose them through explicit fields (`attention_impl`, `remat`) or,
for the hybrid root, by backend. Measured reasons are in each docstring and docs/performance.md.
`ACTIVATIONS` is the table the models' `activation` field picks from (GELU variants).
"""

import functools
import inspect
import math
from typing import Any, Callable, Optional, Sequence, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

Array = jnp.ndarray
Dtype = Any


def _attention_fn(core: Callable[..., Array]) -> Callable[..., Array]:
  """Wraps `core(q, k, v, bias, valid_keys)` as an `attention_fn` for Flax's attention.

  Same inputs/outputs as Flax's default (so the param layout is unchanged). A (batch, heads,
  q, k) `bias` (relative position logits) goes to the core; attention dropout, masks and
  weight sowing (`module`) fall back to Flax's default path. `valid_keys` (an int) masks the
  keys from that index on: the padding `Encoder(pad_tokens=...)` appends once.
  """

  def attention_fn(query: Array, key: Array, value: Array, *, dropout_rate: float = 0.,
                   deterministic: bool = True, dtype: Optional[Dtype] = None,
                   valid_keys: Optional[int] = None, **kwargs) -> Array:
    if (dropout_rate > 0. and not deterministic) or kwargs.get('mask') is not None or (
        'module' in kwargs):
      return flax_attention(query, key, value, dropout_rate=dropout_rate,
                            deterministic=deterministic, dtype=dtype, valid_keys=valid_keys,
                            **kwargs)
    bias = kwargs.get('bias')
    if dtype is not None:
      query, key, value = (t.astype(dtype) for t in (query, key, value))
    return core(query, key, value, None if bias is None else bias.astype(query.dtype),
                valid_keys)

  attention_fn.__doc__ = core.__doc__
  attention_fn.__signature__ = flax_attention.__signature__  # Flax then passes the dropout rng.
  return attention_fn


def flax_attention(query: Array, key: Array, value: Array, *,
                   valid_keys: Optional[int] = None, **kwargs) -> Array:
  """Flax's `nn.dot_product_attention`, called as it is unless `valid_keys` masks a padding."""
  if valid_keys is not None:
    keep = jnp.arange(key.shape[-3]) < valid_keys
    mask = kwargs.get('mask')
    kwargs['mask'] = keep if mask is None else jnp.logical_and(mask, keep)
  return nn.dot_product_attention(query, key, value, **kwargs)


# Flax passes an `attention_fn` only the keyword arguments its signature names (dropout rng,
# rate, mask...), so this one reports `nn.dot_product_attention`'s, plus `valid_keys`.
flax_attention.__signature__ = inspect.signature(nn.dot_product_attention).replace(
    parameters=[*inspect.signature(nn.dot_product_attention).parameters.values(),
                inspect.Parameter('valid_keys', inspect.Parameter.KEYWORD_ONLY, default=None)])


def _heads_first_core(query: Array, key: Array, value: Array,
                      bias: Optional[Array] = None, valid_keys: Optional[int] = None) -> Array:
  """Faster on CPU: heads-major matmuls, normalisation after the weighted sum.

  Same maths as Flax's default, reordered for XLA:CPU: q, k, v go to (batch, heads, tokens,
  dim) so both products are plain batched matmuls (Flax's 'bqhd,bkhd->bhqk' einsums ran at
  14 GFLOP/s for ViT-Ti/16 at batch 32, this at ~45), and the softmax denominator divides the
  (tokens, dim) output instead of the (tokens, tokens) weights. fp32 outputs match the default
  to ~4e-7 relative. A (batch, heads, q, k) `bias` is added to the scores.
  """
  query = query / jnp.sqrt(query.shape[-1]).astype(query.dtype)
  query, key, value = (jnp.swapaxes(t, -3, -2) for t in (query, key, value))
  scores = jnp.matmul(query, jnp.swapaxes(key, -1, -2))
  if bias is not None:
    scores = scores + bias
  if valid_keys is not None:
    keep = jnp.arange(key.shape[-2]) < valid_keys
    scores = jnp.where(keep, scores, jnp.finfo(scores.dtype).min)
  weights = jnp.exp(scores - jax.lax.stop_gradient(scores.max(axis=-1, keepdims=True)))
  out = jnp.matmul(weights, value) / weights.sum(axis=-1, keepdims=True)
  return jnp.swapaxes(out, -3, -2)


def _fused_core(query: Array, key: Array, value: Array, bias: Optional[Array] = None,
                valid_keys: Optional[int] = None) -> Array:
  """`jax.nn.dot_product_attention`: cuDNN flash attention on NVIDIA GPUs for bf16/fp16 inputs.

  Its default (`implementation=None`) is XLA's einsum path on every backend, so the cuDNN
  kernel is asked for explicitly where it applies; shapes or dtypes it rejects (fp32, head
  dims it lacks, ROCm) fall back to the XLA path, which is the same maths. A (batch, heads,
  q, k) `bias` is added to the logits on both paths; `valid_keys` becomes both paths'
  `key_value_seq_lengths`.
  """
  if jax.default_backend() == 'gpu' and query.dtype in (jnp.bfloat16, jnp.float16):
    try:
      return _cudnn_attention(query, key, value, bias, valid_keys)
    except (ValueError, NotImplementedError, RuntimeError):
      pass
  return jax.nn.dot_product_attention(query, key, value, bias=bias, implementation='xla',
                                      key_value_seq_lengths=_seq_lengths(query, valid_keys))


def _seq_lengths(query: Array, valid_keys: Optional[int]) -> Optional[Array]:
  """(batch,) key lengths for `jax.nn.dot_product_attention`, or None for all keys."""
  if valid_keys is None:
    return None
  return jnp.full((query.shape[0],), valid_keys, jnp.int32)


def _cudnn_attention(query: Array, key: Array, value: Array, bias: Optional[Array],
                     valid_keys: Optional[int] = None) -> Array:
  """cuDNN attention; an odd token count (ViT's 197) is padded by one masked token.

  cuDNN's training kernels reject odd sequence lengths; the padded key is masked out through
  `key_value_seq_lengths` and the padded query row is dropped, so the maths is unchanged.
  This pads q, k and v in every layer; `Encoder(pad_tokens=...)` pads the sequence once instead
  and passes `valid_keys`.
  """
  tokens = query.shape[1]
  if tokens % 2 == 0:
    return jax.nn.dot_product_attention(query, key, value, bias=bias, implementation='cudnn',
                                        key_value_seq_lengths=_seq_lengths(query, valid_keys))
  pad = lambda t: jnp.pad(t, ((0, 0), (0, 1), (0, 0), (0, 0)))  # noqa: E731
  if bias is not None:
    bias = jnp.pad(bias, ((0, 0), (0, 0), (0, 1), (0, 1)))
  lengths = _seq_lengths(query, tokens if valid_keys is None else valid_keys)
  out = jax.nn.dot_product_attention(pad(query), pad(key), pad(value), bias=bias,
                                     implementation='cudnn', key_value_seq_lengths=lengths)
  return out[:, :tokens]


fused_attention = _attention_fn(_fused_core)
heads_first_attention = _attention_fn(_heads_first_core)


ATTENTION_FNS = {'xla': flax_attention, 'fused': fused_attention,
                 'heads_first': heads_first_attention}


def quick_gelu(x: Array) -> Array:
  """CLIP's sigmoid approximation of GELU, x * sigmoid(1.702 x) (OpenAI CLIP towers)."""
  return x * jax.nn.sigmoid(1.702 * x)


# The official code uses GELU's tanh approximation; timm's ports default to the exact erf GELU.
ACTIVATIONS = {
    'gelu_tanh': nn.gelu,
    'gelu': functools.partial(nn.gelu, approximate=False),
    'quick_gelu': quick_gelu,
}


def rematerialized(fn: Callable[[Any, Array, Array], Array]) -> Callable[..., Array]:
  """`fn(params, x, rng)` that keeps only its inputs and recomputes the rest for the gradient.

  `rng` is any tree of inputs not differentiated (the encoder passes its dropout rng and MAE's
  kept patch indices).

  Unlike `jax.checkpoint`, the recomputation reads `x + 0 * cotangent`, so it cannot start
  before the backward pass reaches this call: XLA:CPU removes `jax.checkpoint`'s optimisation
  barriers early and CSE then merges the recomputation back into the forward pass (no memory
  saved). The result is the same as `x` for finite cotangents, so gradients are unchanged.
  """

  @jax.custom_vjp
  def call(params, x, rng):
    return fn(params, x, rng)

  def forward(params, x, rng):
    return fn(params, x, rng), (params, x, rng)

  def backward(residuals, cotangent):
    params, x, rng = residuals
    x = x + jnp.zeros_like(x) * cotangent.astype(x.dtype)
    _, vjp = jax.vjp(lambda p, inputs: fn(p, inputs, rng), params, x)
    return (*vjp(cotangent), None)

  call.defvjp(forward, backward)
  return call


class GroupNorm(nn.Module):
  """GroupNorm with `nn.GroupNorm`'s defaults, params ('scale', 'bias': (C,)) and values.

  Faster to train on CPU: the statistics are reduced over the spatial axes per channel first and
  only then per group, so no (..., groups, C / groups) tensor with a tiny last axis is built, and
  normalise + scale + shift fold into one multiply-add. The root's GroupNorm (128x28x28x64)
  trained 2.4x faster this way here (137 → 58 ms per step, forward + backward).
  """

  num_groups: int = 32
  epsilon: float = 1e-6
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32
  scale_init: Callable = nn.initializers.ones
  bias_init: Callable = nn.initializers.zeros

  @nn.compact
  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    channels = x.shape[-1]
    if channels % self.num_groups:
      raise ValueError(f'GroupNorm: {channels} channels do not split into {self.num_groups} '
                       'groups; use a ResNet width that is a multiple of 32.')
    scale = self.param('scale', self.scale_init, (channels,), self.param_dtype)
    bias = self.param('bias', self.bias_init, (channels,), self.param_dtype)
    per_group = channels // self.num_groups
    spatial = tuple(range(1, x.ndim - 1))
    count = per_group * math.prod(x.shape[1:-1])
    x32 = x.astype(jnp.float32)
    group_sum = lambda v: jnp.sum(v, axis=spatial).reshape(  # noqa: E731
        x.shape[0], self.num_groups, per_group).sum(-1) / count
    mean = group_sum(x32)
    var = jnp.maximum(group_sum(jnp.square(x32)) - jnp.square(mean), 0.)
    inv = jnp.repeat(lax.rsqrt(var + self.epsilon), per_group, axis=-1) * scale
    shift = bias - jnp.repeat(mean, per_group, axis=-1) * inv
    shape = (x.shape[0],) + (1,) * len(spatial) + (channels,)
    return (x32 * inv.reshape(shape) + shift.reshape(shape)).astype(self.dtype)


def _same_padding(size: int, window: int, stride: int) -> Tuple[int, int]:
  """TensorFlow/Flax 'SAME' padding (low, high) of one spatial axis."""
  total = max((-(-size // stride) - 1) * stride + window - size, 0)
  return total // 2, total - total // 2


def conv_as_matmul(x: jnp.ndarray, kernel: jnp.ndarray, strides: Sequence[int]) -> jnp.ndarray:
  """A 'SAME' NHWC x HWIO convolution as strided slices and one matmul (im2col).

  Same values as `lax.conv_general_dilated`. For the root's few input channels (3) XLA:CPU's
  convolution is slow: forward + kernel gradient of the 7x7/2 root on 128x56x56x3 took 412 ms
  against 198 ms this way here.
  """
  kh, kw, cin, cout = kernel.shape
  (n, h, w, _), (sh, sw) = x.shape, strides
  oh, ow = -(-h // sh), -(-w // sw)
  x = jnp.pad(x, ((0, 0), _same_padding(h, kh, sh), _same_padding(w, kw, sw), (0, 0)))
  taps = [lax.slice(x, (0, i, j, 0), (n, i + (oh - 1) * sh + 1, j + (ow - 1) * sw + 1, cin),
                    (1, sh, sw, 1)) for i in range(kh) for j in range(kw)]
  patches = jnp.stack(taps, axis=3).reshape(n, oh, ow, kh * kw * cin)
  return patches @ kernel.reshape(kh * kw * cin, cout)


def _max_pool_axis(x: jnp.ndarray, axis: int, window: int, stride: int) -> jnp.ndarray:
  """1-D max-pool with 'SAME' padding along `axis`, as a max over strided slices."""
  size = x.shape[axis]
  out = -(-size // stride)
  padding = [(0, 0)] * x.ndim
  padding[axis] = _same_padding(size, window, stride)
  padded = jnp.pad(x, padding, constant_values=-jnp.inf)
  slices = [lax.slice_in_dim(padded, i, i + (out - 1) * stride + 1, stride, axis)
            for i in range(window)]
  return jax.tree_util.tree_reduce(jnp.maximum, slices)


def max_pool_same(x: jnp.ndarray, window: int = 3, stride: int = 2) -> jnp.ndarray:
  """`nn.max_pool(x, (w, w), (s, s), 'SAME')`, computed separably (rows, then columns).

  Same values; the gradient avoids XLA's select-and-scatter, which made the root's pool
  backward 2.3x slower on CPU here (157 → 68 ms on 128x28x28x64).
  """
  return _max_pool_axis(_max_pool_axis(x, 1, window, stride), 2, window, stride)
