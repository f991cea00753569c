"""ResNets with weight-standardised convs and GroupNorm: the hybrids' stem and a classifier."""

from typing import Any, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax import ops
from vit_jax.families.resnet.presets import UNITS

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
    return ops.conv_as_matmul(x.astype(self.dtype), kernel, self.strides)


class _Unit(nn.Module):
  """What both kinds of unit share: weight-standardised convs, GroupNorms, the projection."""

  features: int
  strides: Sequence[int] = (1, 1)
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32

  def conv(self, features: int, kernel: Sequence[int], strides: Sequence[int], name: str):
    return StdConv(features, kernel, strides, dtype=self.dtype, param_dtype=self.param_dtype,
                   name=name)

  def norm(self, name: str, **kwargs):
    return ops.GroupNorm(dtype=self.dtype, param_dtype=self.param_dtype, name=name, **kwargs)

  def residual(self, x: jnp.ndarray, out_features: int) -> jnp.ndarray:
    """`x`, or its 1x1 projection (`conv_proj`, `gn_proj`) where channels or stride change."""
    if x.shape[-1] == out_features and tuple(self.strides) == (1, 1):
      return x
    return self.norm('gn_proj')(self.conv(out_features, (1, 1), self.strides, 'conv_proj')(x))


class ResidualUnit(_Unit):
  """Bottleneck unit (1x1 → 3x3 → 1x1, 4x expansion) with GroupNorm after each conv."""

  @nn.compact
  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    out_features = self.features * 4
    residual = self.residual(x, out_features)
    y = nn.relu(self.norm('gn1')(self.conv(self.features, (1, 1), (1, 1), 'conv1')(x)))
    y = nn.relu(self.norm('gn2')(self.conv(self.features, (3, 3), self.strides, 'conv2')(y)))
    # Zero-init last GroupNorm scale: each unit starts as the identity on its residual path.
    y = self.conv(out_features, (1, 1), (1, 1), 'conv3')(y)
    y = self.norm('gn3', scale_init=nn.initializers.zeros)(y)
    return nn.relu(residual + y)


class BasicUnit(_Unit):
  """Basic unit (3x3 → 3x3, no expansion: ResNet-18/34's) with the bottleneck unit's norms,
  names and rules: GroupNorm after each conv, a projection where channels or stride change,
  zero-init last GroupNorm scale, ReLU after the residual sum."""

  @nn.compact
  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    residual = self.residual(x, self.features)
    y = nn.relu(self.norm('gn1')(self.conv(self.features, (3, 3), self.strides, 'conv1')(x)))
    y = self.conv(self.features, (3, 3), (1, 1), 'conv2')(y)
    y = self.norm('gn2', scale_init=nn.initializers.zeros)(y)
    return nn.relu(residual + y)


# The module of each kind of unit (`presets.UNITS`); the output width is `features` times
# `expansion`.
UNIT_MODULES = {'bottleneck': ResidualUnit, 'basic': BasicUnit}
EXPANSION = {'bottleneck': 4, 'basic': 1}


class ResNetStage(nn.Module):
  """`block_size` units of kind `unit` named unit1..unitN; only the first one strides."""

  block_size: int
  nout: int
  first_stride: Sequence[int]
  unit: str = UNITS[0]
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    for i in range(self.block_size):
      strides = self.first_stride if i == 0 else (1, 1)
      x = UNIT_MODULES[self.unit](self.nout, strides=strides, dtype=self.dtype,
                                  param_dtype=self.param_dtype, name=f'unit{i + 1}')(x)
    return x


def apply_resnet(x: jnp.ndarray, *, width_factor: float, num_layers: Sequence[int],
                 dtype: Dtype, param_dtype: Dtype, root_kernel: int = 7, root_stride: int = 2,
                 root_pool: bool = True, unit: str = UNITS[0]) -> jnp.ndarray:
  """Runs the hybrid ResNet in the calling module's compact scope (conv_root, gn_root, blockN).

  Called from `VisionTransformer.__call__` so the names sit at the top of the param tree, as in
  the published hybrid checkpoints.

  Downsampling: 4x in the root (7x7/2 conv, 3x3/2 max-pool), then 2x per stage after the first,
  so (3, 4, 9) → 16x. The `root_*` arguments give small-image roots (`ResNet` presets for 28-32px
  inputs) and `unit` the basic units of ResNet-18; the defaults are the official root and its
  bottleneck units, which the hybrids always use.
  """
  if unit not in UNIT_MODULES:
    raise ValueError(f'Unknown ResNet unit={unit!r}; use one of {", ".join(UNITS)}.')
  width = int(64 * width_factor)
  root_conv = StdConvAsMatmul if jax.default_backend() == 'cpu' else StdConv
  x = root_conv(width, (root_kernel,) * 2, (root_stride,) * 2, dtype=dtype,
                param_dtype=param_dtype, name='conv_root')(x)
  x = ops.GroupNorm(dtype=dtype, param_dtype=param_dtype, name='gn_root')(x)
  x = nn.relu(x)
  if root_pool:
    x = ops.max_pool_same(x, window=3, stride=2)
  for i, block_size in enumerate(num_layers):
    x = ResNetStage(block_size=block_size, nout=width * 2**i,
                    first_stride=(1, 1) if i == 0 else (2, 2), unit=unit, dtype=dtype,
                    param_dtype=param_dtype, name=f'block{i + 1}')(x)
  return x


class ResNet(nn.Module):
  """A ResNet classifier: the hybrids' ResNet, global average pooling and a zero-init `head`.

  Layout: the official ViT hybrid's units (conv → GroupNorm → ReLU, weight-standardised convs,
  ReLU after the residual sum, zero-init scale of the unit's last GroupNorm), i.e. ResNet-v1.5
  with GN + WS, not BiT's pre-activation (v2) units. Each unit ends normalised and activated,
  so no norm before the pool is needed, and the params are named as in the hybrid files
  (conv_root, gn_root, block{s}/unit{u}/..., head). Its norms sit where torchvision's ResNets
  have BatchNorms (same parameter count); BiT-R50x1 has the same conv and head weights but
  7,680 fewer norm params.

  Attributes:
    num_classes: outputs of the zero-initialised `head`; 0 or None for pooled features.
    stage_sizes: units per stage, e.g. (3, 4, 6, 3) for ResNet-50; stage s has 64·w·2^s width.
    width_factor: multiplies every width (BiT's "x1", "x2", ...); widths stay multiples of 32
      (GroupNorm's groups).
    root_kernel: side of the root conv (7 for 224px, 3 for 28-32px inputs).
    root_stride: stride of the root conv (2 for 224px, 1 for small inputs).
    root_pool: the 3x3/2 max-pool after the root conv.
    unit: 'bottleneck' (1x1 → 3x3 → 1x1, 4x wider out: ResNet-50) or 'basic' (3x3 → 3x3:
      ResNet-18); a basic unit's convs are named conv1, conv2 (+ conv_proj) with their gn*.
    head_bias_init: constant for the head bias.
    dtype: compute dtype; params stay in `param_dtype`.
  """

  num_classes: Optional[int]
  stage_sizes: Sequence[int]
  width_factor: float = 1
  root_kernel: int = 7
  root_stride: int = 2
  root_pool: bool = True
  unit: str = UNITS[0]
  head_bias_init: float = 0.
  model_name: Optional[str] = None
  family: str = 'resnet'  # What `presets.family_of` reads (not used by the model).
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, inputs: jnp.ndarray, *, train: bool) -> jnp.ndarray:
    del train  # No dropout; GroupNorm keeps no batch statistics.
    x = apply_resnet(inputs.astype(self.dtype), width_factor=self.width_factor,
                     num_layers=self.stage_sizes, dtype=self.dtype,
                     param_dtype=self.param_dtype, root_kernel=self.root_kernel,
                     root_stride=self.root_stride, root_pool=self.root_pool,
                     unit=self.unit)
    x = jnp.mean(x, axis=(1, 2))
    if self.num_classes:
      x = nn.Dense(self.num_classes, kernel_init=nn.initializers.zeros,
                   bias_init=nn.initializers.constant(self.head_bias_init),
                   param_dtype=self.param_dtype, name='head')(x)
    return x.astype(jnp.float32)
