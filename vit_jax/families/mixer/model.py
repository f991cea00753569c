"""MLP-Mixer with the parameter tree of the published Mixer checkpoints."""

from typing import Any, Optional

import flax.linen as nn
import jax.numpy as jnp


class MlpBlock(nn.Module):
  """Dense(mlp_dim) → GELU → Dense(back to the input width)."""

  mlp_dim: int

  @nn.compact
  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    y = nn.gelu(nn.Dense(self.mlp_dim)(x))
    return nn.Dense(x.shape[-1])(y)


class MixerBlock(nn.Module):
  """Token mixing (MLP across patches) then channel mixing (MLP across features), pre-LN."""

  tokens_mlp_dim: int
  channels_mlp_dim: int

  @nn.compact
  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    y = jnp.swapaxes(nn.LayerNorm()(x), 1, 2)
    x = x + jnp.swapaxes(MlpBlock(self.tokens_mlp_dim, name='token_mixing')(y), 1, 2)
    y = nn.LayerNorm()(x)
    return x + MlpBlock(self.channels_mlp_dim, name='channel_mixing')(y)


class MlpMixer(nn.Module):
  """Mixer: patch `stem` conv, `num_blocks` MixerBlocks, LayerNorm, mean-pool, zero-init head."""

  patches: Any
  num_classes: Optional[int]
  num_blocks: int
  hidden_dim: int
  tokens_mlp_dim: int
  channels_mlp_dim: int
  model_name: Optional[str] = None
  family: str = 'mixer'  # What `presets.family_of` reads (not used by the model).

  @nn.compact
  def __call__(self, inputs: jnp.ndarray, *, train: bool) -> jnp.ndarray:
    del train  # Mixer has no dropout.
    patch = tuple(self.patches['size'])
    h, w = inputs.shape[1:3]
    if h % patch[0] or w % patch[1]:
      raise ValueError(f'the image size {h}x{w} is not divisible by the patch size '
                       f'{patch[0]}x{patch[1]}; use a multiple of {patch[0]}.')
    x = nn.Conv(self.hidden_dim, patch, strides=patch, name='stem')(inputs)
    x = x.reshape(x.shape[0], -1, x.shape[-1])
    for _ in range(self.num_blocks):
      x = MixerBlock(self.tokens_mlp_dim, self.channels_mlp_dim)(x)
    x = jnp.mean(nn.LayerNorm(name='pre_head_layer_norm')(x), axis=1)
    if self.num_classes:
      x = nn.Dense(self.num_classes, kernel_init=nn.initializers.zeros, name='head')(x)
    return x
