"""ResNet-v2 pieces of the hybrid ResNet+ViT models (weight-standardised convs, GroupNorm)."""

import math
from typing import Any, Callable, Sequence, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

Dtype = Any

# The published hybrids standardise with (w - mean) / (std + 1e-5); timm uses sqrt(var + 1e-8).
WEIGHT_STD_EPS = 1e-5


def weight_standardize(kernel: jnp.ndarray, eps: float = WEIGHT_STD_EPS) -> jnp.ndarray:
  """Standardises an HWIO kernel per output channel over its (H, W, in) axes."""
  axes = tuple(range(kernel.ndim - 1))
  centered = kernel - jnp.mean(kernel, axis=axes, keepdims=True)
  return centered / (jnp.std(centered, axis=axes, keepdims=True) + eps)


class StdConv(nn.Conv):
  """A bias-free `nn.Conv` whose kernel is weight-standardised at every call.

  The stored parameter stays the raw kernel (as in the published checkpoints); only the value
  used by the convolution is standardised.
  """

  use_bias: bool = False

  def param(self, name: str, init_fn, *init_args, **init_kwargs):
    value = super().param(name, init_fn, *init_args, **init_kwargs)
    return weight_standardize(value) if name == 'kernel' else value


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


class StdConvAsMatmul(nn.Module):
  """`StdConv` ('SAME', no bias, same 'kernel' param) computed by `conv_as_matmul`."""

  features: int
  kernel_size: Sequence[int]
  strides: Sequence[int]
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    shape = tuple(self.kernel_size) + (x.shape[-1], self.features)
    kernel = self.param('kernel', nn.initializers.lecun_normal(), shape, self.param_dtype)
    kernel = weight_standardize(kernel).astype(self.dtype)
    return conv_as_matmul(x.astype(self.dtype), kernel, self.strides)


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


class ResidualUnit(nn.Module):
  """Bottleneck unit (1x1 → 3x3 → 1x1, 4x expansion) with GroupNorm after each conv."""

  features: int
  strides: Sequence[int] = (1, 1)
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    conv = lambda f, k, s, name: StdConv(  # noqa: E731
        f, k, s, dtype=self.dtype, param_dtype=self.param_dtype, name=name)
    norm = lambda name, **kw: GroupNorm(  # noqa: E731
        dtype=self.dtype, param_dtype=self.param_dtype, name=name, **kw)
    out_features = self.features * 4
    residual = x
    if x.shape[-1] != out_features or tuple(self.strides) != (1, 1):
      residual = norm('gn_proj')(conv(out_features, (1, 1), self.strides, 'conv_proj')(x))
    y = nn.relu(norm('gn1')(conv(self.features, (1, 1), (1, 1), 'conv1')(x)))
    y = nn.relu(norm('gn2')(conv(self.features, (3, 3), self.strides, 'conv2')(y)))
    # Zero-init last GroupNorm scale: each unit starts as the identity on its residual path.
    y = conv(out_features, (1, 1), (1, 1), 'conv3')(y)
    y = norm('gn3', scale_init=nn.initializers.zeros)(y)
    return nn.relu(residual + y)


class ResNetStage(nn.Module):
  """`block_size` bottleneck units named unit1..unitN; only the first one strides."""

  block_size: int
  nout: int
  first_stride: Sequence[int]
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    for i in range(self.block_size):
      strides = self.first_stride if i == 0 else (1, 1)
      x = ResidualUnit(self.nout, strides=strides, dtype=self.dtype,
                       param_dtype=self.param_dtype, name=f'unit{i + 1}')(x)
    return x


def apply_resnet(x: jnp.ndarray, *, width_factor: float,
                 num_layers: Sequence[int], dtype: Dtype, param_dtype: Dtype) -> jnp.ndarray:
  """Runs the hybrid ResNet in the calling module's compact scope (conv_root, gn_root, blockN).

  Called from `VisionTransformer.__call__` so the names sit at the top of the param tree, as in
  the published hybrid checkpoints.

  Downsampling: 4x in the root, then 2x per stage after the first, so (3, 4, 9) → 16x.
  """
  width = int(64 * width_factor)
  root_conv = StdConvAsMatmul if jax.default_backend() == 'cpu' else StdConv
  x = root_conv(width, (7, 7), (2, 2), dtype=dtype, param_dtype=param_dtype, name='conv_root')(x)
  x = GroupNorm(dtype=dtype, param_dtype=param_dtype, name='gn_root')(x)
  x = nn.relu(x)
  x = max_pool_same(x, window=3, stride=2)
  for i, block_size in enumerate(num_layers):
    x = ResNetStage(block_size=block_size, nout=width * 2**i,
                    first_stride=(1, 1) if i == 0 else (2, 2), dtype=dtype,
                    param_dtype=param_dtype, name=f'block{i + 1}')(x)
  return x
