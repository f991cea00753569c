"""The ViT's transformer encoder, with the official Linen names: `MlpBlock`, `Encoder1DBlock`
and `Encoder` (named `Transformer` in a checkpoint), and big_vision's `MAPHead`.

The encoder is used apart from the ViT too: MAE's decoder (`models_masked`) stacks its blocks and
the feature tools (`tools/features`) read its intermediates. `models_vit` keeps the official
names (`models_vit.Encoder`, `Encoder1DBlock`, `MlpBlock`) pointing here.
"""

import functools
from typing import Any, Callable, Dict, Optional, Tuple

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from vit_jax import ops
from vit_jax import position_embeddings

Array = jnp.ndarray
Dtype = Any


class MlpBlock(nn.Module):
  """Dense → activation (official: GELU's tanh approximation) → dropout → Dense → dropout."""

  mlp_dim: int
  activation: str = 'gelu_tanh'
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32
  out_dim: Optional[int] = None
  dropout_rate: float = 0.1
  kernel_init: Callable[..., Array] = nn.initializers.xavier_uniform()
  bias_init: Callable[..., Array] = nn.initializers.normal(stddev=1e-6)

  @nn.compact
  def __call__(self, inputs: Array, *, deterministic: bool) -> Array:
    dense = lambda features: nn.Dense(  # noqa: E731
        features, dtype=self.dtype, param_dtype=self.param_dtype,
        kernel_init=self.kernel_init, bias_init=self.bias_init)
    x = ops.ACTIVATIONS[self.activation](dense(self.mlp_dim)(inputs))
    x = nn.Dropout(rate=self.dropout_rate)(x, deterministic=deterministic)
    x = dense(self.out_dim or inputs.shape[-1])(x)
    return nn.Dropout(rate=self.dropout_rate)(x, deterministic=deterministic)


class Encoder1DBlock(nn.Module):
  """Pre-LN transformer block: x + Attn(LN(x)), then x + MLP(LN(x)).

  `drop_path_rate` > 0 adds stochastic depth: each residual branch is dropped per example.
  `layer_scale` > 0 multiplies each branch by a learned per-channel `ls1`/`ls2` initialised to it
  (CaiT/DeiT-III/DINOv2; timm's `ls1.gamma`). `relative_grid` (rows, cols) of the patch grid
  gives the attention the paper's relative position bias (`RelativePositionKeys`, its own
  `relative_posemb` table); None for none. `valid_tokens` < the sequence length masks the keys
  after it: the padding `Encoder(pad_tokens=...)` added (its outputs are dropped there). The
  call's `keep` (batch, k) names the grid's patches that follow the prefix tokens when not all
  do (MAE's visible ones, `keep_tokens`), so each keeps its own relative offsets. `rope`
  ('rope' or 'rope_mixed') rotates the queries and keys of the `rope_grid`'s patches by their
  row and column (`position_embeddings.rotate`); 'rope_mixed' learns its per-head frequencies
  (`rope_freqs`, (2, heads, head_dim // 2)).
  """

  mlp_dim: int
  num_heads: int
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.1
  drop_path_rate: float = 0.
  attention_impl: str = 'xla'
  activation: str = 'gelu_tanh'
  layer_norm_eps: float = 1e-6
  layer_scale: float = 0.
  relative_grid: Optional[Tuple[int, int]] = None
  valid_tokens: Optional[int] = None
  rope: Optional[str] = None
  rope_grid: Optional[Tuple[int, int]] = None

  @nn.compact
  def __call__(self, inputs: Array, deterministic: bool,
               keep: Optional[Array] = None) -> Array:
    drop_path = nn.Dropout(rate=self.drop_path_rate, broadcast_dims=(1, 2))
    x = nn.LayerNorm(epsilon=self.layer_norm_eps, dtype=self.dtype,
                     param_dtype=self.param_dtype)(inputs)
    # Attention weights are only materialised (and sown) when someone collects intermediates.
    sow = self.is_mutable_collection('intermediates')
    x = nn.MultiHeadDotProductAttention(
        num_heads=self.num_heads,
        dtype=self.dtype,
        param_dtype=self.param_dtype,
        kernel_init=nn.initializers.xavier_uniform(),
        broadcast_dropout=False,
        dropout_rate=self.attention_dropout_rate,
        attention_fn=self._attention_fn(x, keep),
    )(x, x, deterministic=deterministic, sow_weights=sow)
    x = nn.Dropout(rate=self.dropout_rate)(x, deterministic=deterministic)
    x = inputs + drop_path(self._scale('ls1', x), deterministic=deterministic)

    y = nn.LayerNorm(epsilon=self.layer_norm_eps, dtype=self.dtype,
                     param_dtype=self.param_dtype)(x)
    y = MlpBlock(mlp_dim=self.mlp_dim, dtype=self.dtype, param_dtype=self.param_dtype,
                 dropout_rate=self.dropout_rate, activation=self.activation)(
                     y, deterministic=deterministic)
    return x + drop_path(self._scale('ls2', y), deterministic=deterministic)

  def _attention_fn(self, x: Array, keep: Optional[Array]):
    attention_fn = ops.ATTENTION_FNS[self.attention_impl]
    tokens = x.shape[1] if self.valid_tokens is None else self.valid_tokens
    if tokens < x.shape[1]:
      attention_fn = functools.partial(attention_fn, valid_keys=tokens)
    if self.rope is not None:
      return position_embeddings.rotary_attention(attention_fn,
                                                  self._rope_angles(x, tokens, keep))
    if self.relative_grid is None:
      return attention_fn
    keys, index = position_embeddings.RelativePositionKeys(
        grid_shape=self.relative_grid, num_heads=self.num_heads, param_dtype=self.param_dtype,
        name='relative_posemb')(tokens, x.shape[-1] // self.num_heads, keep)
    # Padded rows and columns read any offset (0): their keys are masked, their rows dropped.
    pad = ((0, 0),) * (index.ndim - 2) + ((0, x.shape[1] - tokens),) * 2
    index = np.pad(index, pad) if keep is None else jnp.pad(index, pad)
    return position_embeddings.relative_attention(attention_fn, keys, index)

  def _rope_angles(self, x: Array, tokens: int, keep: Optional[Array]) -> Array:
    """The rotation angles of the sequence's tokens (`position_embeddings.sequence_angles`)."""
    head_dim = x.shape[-1] // self.num_heads
    position_embeddings.check_rope_head_dim(head_dim, self.rope)
    if self.rope == 'rope_mixed':
      freqs = self.param('rope_freqs', position_embeddings.init_mixed_rope_freqs,
                         (2, self.num_heads, head_dim // 2), self.param_dtype)
      angles = position_embeddings.mixed_rope_angles(freqs, self.rope_grid)
    else:
      angles = position_embeddings.axial_rope_angles(self.rope_grid, head_dim)
    grid = self.rope_grid[0] * self.rope_grid[1] if keep is None else keep.shape[1]
    if tokens < grid:
      raise ValueError(f'posemb={self.rope!r}: {tokens} tokens cannot hold a '
                       f'{self.rope_grid[0]}x{self.rope_grid[1]} grid')
    return position_embeddings.sequence_angles(angles, tokens - grid, x.shape[1], keep)

  def _scale(self, name: str, x: Array) -> Array:
    if not self.layer_scale:
      return x
    gamma = self.param(name, nn.initializers.constant(self.layer_scale), (x.shape[-1],),
                       self.param_dtype)
    return x * gamma.astype(x.dtype)


class MAPHead(nn.Module):
  """Multihead attention pooling (big_vision's MAPHead; timm's `attn_pool` of SigLIP).

  A learned `probe` query attends over all tokens; then x + MLP(LN(x)), no residual around the
  attention (as both references). Returns (batch, hidden).
  """

  mlp_dim: int
  num_heads: int
  activation: str = 'gelu_tanh'
  layer_norm_eps: float = 1e-6
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x: Array) -> Array:
    n, _, d = x.shape
    probe = self.param('probe', nn.initializers.xavier_uniform(), (1, 1, d), self.param_dtype)
    probe = jnp.tile(probe.astype(x.dtype), (n, 1, 1))
    x = nn.MultiHeadDotProductAttention(
        num_heads=self.num_heads, dtype=self.dtype, param_dtype=self.param_dtype,
        kernel_init=nn.initializers.xavier_uniform())(probe, x)
    y = nn.LayerNorm(epsilon=self.layer_norm_eps, dtype=self.dtype,
                     param_dtype=self.param_dtype)(x)
    x = x + MlpBlock(mlp_dim=self.mlp_dim, dtype=self.dtype, param_dtype=self.param_dtype,
                     dropout_rate=0., activation=self.activation)(y, deterministic=True)
    return x[:, 0]


class Encoder(nn.Module):
  """Position embeddings, `num_layers` blocks named encoderblock_{i}, then `encoder_norm`.

  `prefix` tokens (class, distillation, register) are concatenated before the grid: before the
  position embedding is added (official), or after it with `no_embed_class` (DeiT-III, DINOv2
  with registers: the table covers the grid only). `norm_pre` adds a LayerNorm before the
  blocks (CLIP); `final_norm=False` leaves out `encoder_norm` (fc_norm models normalise after
  pooling instead). `pad_tokens` > 0 pads the sequence once, before the blocks, to a multiple
  of it (masked keys, rows dropped after the blocks): the same values, and kernels that want
  even or aligned lengths (cuDNN: ViT's 197 tokens) get them without padding in every layer.
  """

  num_layers: int
  mlp_dim: int
  num_heads: int
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.1
  add_position_embedding: bool = True
  posemb: str = 'learn'
  stochastic_depth: float = 0.
  remat: bool = False
  attention_impl: str = 'xla'
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32
  activation: str = 'gelu_tanh'
  layer_norm_eps: float = 1e-6
  layer_scale: float = 0.
  no_embed_class: bool = False
  norm_pre: bool = False
  final_norm: bool = True
  pad_tokens: int = 0

  @nn.compact
  def __call__(self, x: Array, *, train: bool,
               grid_shape: Optional[Tuple[int, int]] = None,
               prefix: Optional[Array] = None, keep: Optional[Array] = None) -> Array:
    if x.ndim != 3:
      raise ValueError(f'Encoder expects (batch, tokens, hidden), got {x.shape}')
    num_grid = x.shape[1]
    if prefix is not None and not self.no_embed_class:
      x = jnp.concatenate([prefix, x], axis=1)
    x = self._add_position_embedding(x, grid_shape)
    if keep is not None:  # MAE: the blocks see only the visible patches (and the prefix).
      x = keep_tokens(x, keep, x.shape[1] - num_grid)
    if prefix is not None and self.no_embed_class:
      x = jnp.concatenate([prefix, x], axis=1)
    grid = self._attention_grid(grid_shape)
    in_rope = grid is not None and self.posemb in position_embeddings.ROPE_KINDS
    rope = self.posemb if in_rope else None
    x = nn.Dropout(rate=self.dropout_rate)(x, deterministic=not train)
    if self.norm_pre:
      x = nn.LayerNorm(epsilon=self.layer_norm_eps, param_dtype=self.param_dtype,
                       name='norm_pre')(x)
    remat = self._rematerialize()
    num_tokens = x.shape[1]
    # Collected attention weights (analysis) keep the plain shape: no padding there either.
    if not self.is_mutable_collection('intermediates'):
      x = pad_tokens(x, self.pad_tokens)
    for i in range(self.num_layers):
      block = self.block(i, grid_shape, grid, rope, num_tokens)
      x = self._remat_block(block, x, not train, keep) if remat else block(x, not train, keep)
    x = x[:, :num_tokens]
    if not self.final_norm:
      return x
    return nn.LayerNorm(epsilon=self.layer_norm_eps, param_dtype=self.param_dtype,
                        name='encoder_norm')(x)

  def block(self, i: int, grid_shape: Optional[Tuple[int, int]],
            attention_grid: Optional[Tuple[int, int]], rope: Optional[str],
            num_tokens: int) -> nn.Module:
    """Block `i`: the relative bias or rotary embedding of `attention_grid` in its attention
    and the padding after `num_tokens` masked (a family's encoder builds its own blocks)."""
    del grid_shape  # The token grid; the ViT's blocks need only the attention grid.
    return Encoder1DBlock(**self.block_fields(i), relative_grid=None if rope else attention_grid,
                          rope=rope, rope_grid=attention_grid if rope else None,
                          valid_tokens=num_tokens)

  def block_fields(self, i: int) -> Dict[str, Any]:
    """The fields block `i` (`encoderblock_{i}`) takes from the encoder; stochastic depth
    grows linearly from 0 (first block) to `stochastic_depth` (last)."""
    rate = self.stochastic_depth * i / max(self.num_layers - 1, 1)
    return dict(mlp_dim=self.mlp_dim, num_heads=self.num_heads, dtype=self.dtype,
                param_dtype=self.param_dtype, dropout_rate=self.dropout_rate,
                attention_dropout_rate=self.attention_dropout_rate, drop_path_rate=rate,
                attention_impl=self.attention_impl, activation=self.activation,
                layer_norm_eps=self.layer_norm_eps, layer_scale=self.layer_scale,
                name=f'encoderblock_{i}')

  def _rematerialize(self) -> bool:
    """Blocks are rematerialised only where it matters: when gradients are taken of an
    `apply` (not at init, and not while intermediates are being collected for analysis)."""
    return (self.remat and not self.is_initializing()
            and not self.is_mutable_collection('intermediates'))

  def _remat_block(self, block: 'Encoder1DBlock', x: Array, deterministic: bool,
                   keep: Optional[Array]) -> Array:
    """Runs `block` on its own params, recomputing its activations in the backward pass."""
    # Without a 'dropout' rng the block raises Flax's own error if one of its rates needs it.
    random = not deterministic and self.has_rng('dropout')
    rng = self.make_rng('dropout') if random else None
    definition = block.clone(parent=None)

    def apply(params, inputs, given):
      key, kept = given
      rngs = {'dropout': key} if random else None
      return definition.apply({'params': params}, inputs, deterministic, kept, rngs=rngs)

    return ops.rematerialized(apply)(block.variables['params'], x, (rng, keep))

  def _attention_grid(self, grid_shape: Optional[Tuple[int, int]]
                      ) -> Optional[Tuple[int, int]]:
    """The patch grid a position embedding inside each block's attention spans (relative
    bias, rotary); None without one."""
    if not (self.add_position_embedding
            and self.posemb in position_embeddings.IN_ATTENTION):
      return None
    if grid_shape is None:
      raise ValueError(f'posemb={self.posemb!r} needs the token grid_shape')
    return tuple(grid_shape)

  def _add_position_embedding(self, x: Array, grid_shape: Optional[Tuple[int, int]]) -> Array:
    if not self.add_position_embedding:
      return x
    return position_embeddings.add(x, self.posemb, grid_shape, self.param_dtype)


def pad_tokens(x: Array, multiple: int) -> Array:
  """(batch, tokens, hidden) `x` with zero tokens appended up to a multiple of `multiple` (0: x)."""
  extra = -x.shape[1] % multiple if multiple else 0
  return jnp.pad(x, ((0, 0), (0, extra), (0, 0))) if extra else x


def keep_tokens(x: Array, keep: Array, num_prefix: int) -> Array:
  """The prefix tokens of `x` (batch, prefix + patches, hidden), then the patches at `keep`."""
  patches = jnp.take_along_axis(x[:, num_prefix:], keep[..., None], axis=1)
  return jnp.concatenate([x[:, :num_prefix], patches], axis=1)
