"""The EVA family's ViT (timm's `eva` module: EVA, EVA-02, DINOv3, Perception Encoder, RoPE ViTs).

A ViT with what those weights add: rotary position embeddings inside attention (axial with
EVA's reference grid, the learned mixed kind, DINOv3's centred coordinates; with or without an
absolute table), SwiGLU MLPs (EVA-02's with a LayerNorm inside), LayerNorms on queries and keys
and on the attention output, EVA's query/value-only biases, and attention pooling with its own
heads (PE). The tree reads like the ViT's: `embedding`, `cls`/`reg`, `Transformer/
posembed_input`, `Transformer/encoderblock_{i}` with `LayerNorm_0`, `MultiHeadDotProductAttention_0`
(query/key/value/out, plus `q_norm`/`k_norm`/`norm`), `ls1`/`ls2`, `LayerNorm_1` and `MlpBlock_0`
(Dense_0/Dense_1) or `SwiGLU_0` (gate/up/norm/down), `Transformer/encoder_norm`, `fc_norm`,
`MAPHead_0`, `head`; so predict, features, few-shot and analyze read it as they read a ViT.
"""

from typing import Any, Optional, Sequence, Tuple

import flax.linen as nn
import jax.numpy as jnp

from vit_jax import models_transformer
from vit_jax import ops
from vit_jax import position_embeddings
from vit_jax.families.vit.model import VisionTransformer, _check_choice

Array = jnp.ndarray
Dtype = Any

# 'axial': fixed bands on patch indices (EVA-02, PE, the RoPE ViTs); 'mixed': learned per-head
# frequencies in every block (`rope_freqs`); 'centered': fixed bands on cell centres in [-1, 1]
# (DINOv3).
ROPE_KINDS = ('none', 'axial', 'mixed', 'centered')
QKV_BIASES = ('qkv', 'qv', 'none')  # 'qv': EVA's attention, whose key has no bias.
MLPS = ('mlp', 'swiglu')
# Pooling: the ViT's, and 'token_map' (a class token in the sequence, pooled by attention: PE).
CLASSIFIERS = ('token', 'gap', 'token_gap', 'map', 'token_map', 'unpooled', 'token_unpooled')


class EvaAttention(nn.Module):
  """Multi-head self-attention with EVA's options, in Flax's `MultiHeadDotProductAttention`
  names (query/key/value/out, kernels (width, heads, head_dim) and (heads, head_dim, width)).

  `qkv_bias` 'qv' leaves the key without a bias (EVA's zero `k_bias`: with rotary embeddings a
  key bias is not softmax-invariant, so it must stay absent rather than be trained).
  """

  num_heads: int
  qkv_bias: str = 'qkv'
  qk_norm: bool = False
  attention_norm: bool = False
  layer_norm_eps: float = 1e-6
  dropout_rate: float = 0.
  attention_impl: str = 'xla'
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x: Array, angles: Optional[Array], *, half: bool,
               deterministic: bool) -> Array:
    width = x.shape[-1]
    head_dim = width // self.num_heads
    projections = {
        name: nn.DenseGeneral((self.num_heads, head_dim), use_bias=bias, dtype=self.dtype,
                              param_dtype=self.param_dtype, name=name,
                              kernel_init=nn.initializers.xavier_uniform())(x)
        for name, bias in (('query', self.qkv_bias != 'none'), ('key', self.qkv_bias == 'qkv'),
                           ('value', self.qkv_bias != 'none'))}
    query, key, value = projections['query'], projections['key'], projections['value']
    if self.qk_norm:
      query, key = (nn.LayerNorm(epsilon=self.layer_norm_eps, dtype=self.dtype,
                                 param_dtype=self.param_dtype, name=name)(t)
                    for name, t in (('q_norm', query), ('k_norm', key)))
    if angles is not None:
      query = position_embeddings.rotate(query, angles, half)
      key = position_embeddings.rotate(key, angles, half)
    # Weights are sown (Flax's path) only when someone collects intermediates (analyze).
    sow = self.is_mutable_collection('intermediates')
    random = not deterministic and self.dropout_rate > 0.
    out = ops.ATTENTION_FNS[self.attention_impl](
        query, key, value, dropout_rate=self.dropout_rate, deterministic=not random,
        dropout_rng=self.make_rng('dropout') if random else None, dtype=self.dtype,
        module=self if sow else None)
    if self.attention_norm:  # EVA-02 CLIP's scale-norm before the output projection.
      shape = out.shape
      out = nn.LayerNorm(epsilon=self.layer_norm_eps, dtype=self.dtype,
                         param_dtype=self.param_dtype, name='norm')(
                             out.reshape(*shape[:-2], width)).reshape(shape)
    return nn.DenseGeneral(width, axis=(-2, -1), dtype=self.dtype, param_dtype=self.param_dtype,
                           kernel_init=nn.initializers.xavier_uniform(), name='out')(out)


class SwiGLU(nn.Module):
  """silu(gate(x)) * up(x) → (LayerNorm, EVA-02's) → down: timm's SwiGLU and packed GluMlp."""

  mlp_dim: int
  norm: bool = False
  layer_norm_eps: float = 1e-6
  dropout_rate: float = 0.
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x: Array, *, deterministic: bool) -> Array:
    dense = lambda features, name: nn.Dense(  # noqa: E731
        features, dtype=self.dtype, param_dtype=self.param_dtype, name=name,
        kernel_init=nn.initializers.xavier_uniform())
    y = nn.silu(dense(self.mlp_dim, 'gate')(x)) * dense(self.mlp_dim, 'up')(x)
    y = nn.Dropout(rate=self.dropout_rate)(y, deterministic=deterministic)
    if self.norm:
      y = nn.LayerNorm(epsilon=self.layer_norm_eps, dtype=self.dtype,
                       param_dtype=self.param_dtype, name='norm')(y)
    y = dense(x.shape[-1], 'down')(y)
    return nn.Dropout(rate=self.dropout_rate)(y, deterministic=deterministic)


class EvaBlock(models_transformer.Encoder1DBlock):
  """x + ls1 · Attn(LN(x)), then x + ls2 · MLP(LN(x)), with `EvaAttention` and the rotary
  embedding of `rope_grid` (`rope_kind` and its settings, `Eva`'s fields)."""

  qkv_bias: str = 'qkv'
  qk_norm: bool = False
  attention_norm: bool = False
  mlp: str = 'mlp'
  mlp_norm: bool = False
  rope_kind: str = 'none'
  rope_temperature: float = 10_000.
  rope_offset: float = 0.
  rope_reference: Optional[Tuple[int, int]] = None
  rope_xy: bool = False
  rope_half: bool = False

  @nn.compact
  def __call__(self, inputs: Array, deterministic: bool,
               keep: Optional[Array] = None) -> Array:
    if keep is not None:  # Rotary angles of kept patches are not computed here.
      raise ValueError('The EVA family has no masked pretraining (keep=...).')
    drop_path = nn.Dropout(rate=self.drop_path_rate, broadcast_dims=(1, 2))
    norm = lambda: nn.LayerNorm(epsilon=self.layer_norm_eps, dtype=self.dtype,  # noqa: E731
                                param_dtype=self.param_dtype)
    x = norm()(inputs)
    x = EvaAttention(
        num_heads=self.num_heads, qkv_bias=self.qkv_bias, qk_norm=self.qk_norm,
        attention_norm=self.attention_norm, layer_norm_eps=self.layer_norm_eps,
        dropout_rate=self.attention_dropout_rate, attention_impl=self.attention_impl,
        dtype=self.dtype, param_dtype=self.param_dtype, name='MultiHeadDotProductAttention_0')(
            x, self._angles(x), half=self.rope_half, deterministic=deterministic)
    x = nn.Dropout(rate=self.dropout_rate)(x, deterministic=deterministic)
    x = inputs + drop_path(self._scale('ls1', x), deterministic=deterministic)
    y = norm()(x)
    if self.mlp == 'swiglu':
      y = SwiGLU(mlp_dim=self.mlp_dim, norm=self.mlp_norm, layer_norm_eps=self.layer_norm_eps,
                 dropout_rate=self.dropout_rate, dtype=self.dtype,
                 param_dtype=self.param_dtype, name='SwiGLU_0')(y, deterministic=deterministic)
    else:
      y = models_transformer.MlpBlock(
          mlp_dim=self.mlp_dim, activation=self.activation, dropout_rate=self.dropout_rate,
          dtype=self.dtype, param_dtype=self.param_dtype, name='MlpBlock_0')(
              y, deterministic=deterministic)
    return x + drop_path(self._scale('ls2', y), deterministic=deterministic)

  def _angles(self, x: Array) -> Optional[Array]:
    """The sequence's rotation angles: 0 for the prefix tokens, then the grid's; None without
    rotary embeddings."""
    if self.rope_kind == 'none':
      return None
    head_dim = x.shape[-1] // self.num_heads
    coords = position_embeddings.rope_coordinates(
        self.rope_grid, xy=self.rope_xy, offset=self.rope_offset,
        reference=self.rope_reference, centered=self.rope_kind == 'centered')
    if self.rope_kind == 'mixed':
      freqs = self.param('rope_freqs', position_embeddings.init_mixed_rope_freqs,
                         (2, self.num_heads, head_dim // 2), self.param_dtype,
                         self.rope_temperature).astype(jnp.float32)
      angles = coords[:, 0, None, None] * freqs[0] + coords[:, 1, None, None] * freqs[1]
    else:
      angles = position_embeddings.coordinate_rope_angles(
          coords, head_dim, self.rope_temperature, centered=self.rope_kind == 'centered')
    prefix = x.shape[1] - coords.shape[0]
    return position_embeddings.sequence_angles(angles, prefix, x.shape[1])


class EvaEncoder(models_transformer.Encoder):
  """The ViT's encoder (prefix tokens, the absolute table if any, `norm_pre`, blocks named
  encoderblock_{i}, `encoder_norm` unless `final_norm` is off: PE's spatial towers) with
  `EvaBlock`s."""

  eva_fields: Any = None  # Dict of `EvaBlock`'s own fields, the same for every block.

  def block(self, i: int, grid_shape: Optional[Tuple[int, int]],
            attention_grid: Optional[Tuple[int, int]], rope: Optional[str],
            num_tokens: int) -> nn.Module:
    """An `EvaBlock`: its rotary embedding spans the token grid itself (the encoder's posemb
    is only the absolute table, so the ViT's in-attention grid, relative bias and rope are
    never set here; `pad_tokens` stays 0, so no padding is masked)."""
    del attention_grid, rope, num_tokens
    return EvaBlock(**self.block_fields(i), rope_grid=tuple(grid_shape),
                    **dict(self.eva_fields or {}))


class Eva(VisionTransformer):
  """timm's `Eva` in this package's terms: `VisionTransformer`'s fields (posemb 'learn' or
  'none': the absolute table) and these.

  Attributes:
    rope: rotary embedding kind, one of `ROPE_KINDS` ('none' for EVA-1's absolute table only).
    rope_temperature: the bands' base (EVA-02 and PE 10000, DINOv3 and the RoPE ViTs 100, mixed
      RoPE's starting magnitudes 10).
    rope_offset: added to every patch index (PE: 1).
    rope_reference: the (rows, cols) grid the coordinates are rescaled to span (EVA's
      `ref_feat_shape`); None = the grid itself.
    rope_xy: coordinates in (col, row) order (timm's grid_indexing 'xy').
    rope_half: rotate channel i with i + head_dim / 2 (timm's rotate_half) instead of pairs.
    qkv_bias: 'qkv', 'qv' (EVA: no key bias) or 'none'.
    qk_norm: LayerNorms on each head's queries and keys.
    attention_norm: a LayerNorm on the attention output before its projection (EVA-02 CLIP).
    mlp: 'mlp' (Dense, activation, Dense) or 'swiglu'.
    mlp_norm: a LayerNorm inside the SwiGLU (EVA-02).
    final_norm: `encoder_norm` after the blocks when there is no `fc_norm` (PE's spatial and
      language towers have neither).
    map_heads: heads of the attention pooling (PE: 8); None = the blocks'.
    map_mlp_dim: MLP width of the attention pooling; None = the blocks'.
  """

  classifier_choices = CLASSIFIERS

  family: str = 'eva'
  activation: str = 'gelu'
  rope: str = 'none'
  rope_temperature: float = 10_000.
  rope_offset: float = 0.
  rope_reference: Optional[Sequence[int]] = None
  rope_xy: bool = False
  rope_half: bool = False
  qkv_bias: str = 'qkv'
  qk_norm: bool = False
  attention_norm: bool = False
  mlp: str = 'mlp'
  mlp_norm: bool = False
  final_norm: bool = True
  map_heads: Optional[int] = None
  map_mlp_dim: Optional[int] = None

  def __post_init__(self):
    _check_choice('rope', self.rope, ROPE_KINDS)
    _check_choice('qkv_bias', self.qkv_bias, QKV_BIASES)
    _check_choice('mlp', self.mlp, MLPS)
    _check_choice('posemb (the EVA family: its absolute table)', self.posemb, ('learn', 'none'))
    if self.rope != 'none' and self.transformer is not None:
      position_embeddings.check_rope_head_dim(
          self.hidden_size // self.transformer['num_heads'], f'rope={self.rope}')
    if self.mlp_norm and self.mlp != 'swiglu':
      raise ValueError('mlp_norm=True is the SwiGLU\'s inner LayerNorm (EVA-02): set mlp=swiglu.')
    if self.rope == 'centered' and self.rope_reference is not None:
      raise ValueError('rope=centered spans [-1, 1] on any grid: rope_reference must be None.')
    if self.distilled or self.representation_size is not None or self.resnet is not None:
      raise ValueError('The EVA family has no distillation token, pre_logits or ResNet root.')
    if self.pad_tokens or self.transformer is None:
      raise ValueError('The EVA family needs its transformer and pads no tokens (pad_tokens=0: '
                       'its blocks mask no padding).')
    super().__post_init__()

  def __call__(self, inputs: Array, *, train: bool, corrupt: Any = None,
               keep: Optional[Array] = None) -> Array:
    """Logits (or pooled features without a head) of NHWC `inputs`: the ViT's path (patch
    embedding, prefix tokens, encoder, pooling, fc_norm, head) with `EvaEncoder`."""
    if corrupt is not None or keep is not None:
      raise ValueError('The EVA family has no masked pretraining (corrupt=..., keep=...).')
    return super().__call__(inputs, train=train)

  def _encoder(self) -> nn.Module:
    reference = None if self.rope_reference is None else tuple(self.rope_reference)
    eva_fields = dict(qkv_bias=self.qkv_bias, qk_norm=self.qk_norm,
                      attention_norm=self.attention_norm, mlp=self.mlp, mlp_norm=self.mlp_norm,
                      rope_kind=self.rope, rope_temperature=self.rope_temperature,
                      rope_offset=self.rope_offset, rope_reference=reference,
                      rope_xy=self.rope_xy, rope_half=self.rope_half)
    fields = dict(self._encoder_fields(), final_norm=self.final_norm and not self.fc_norm)
    return EvaEncoder(name='Transformer', eva_fields=eva_fields, **fields)

  def _pool(self, x: Array) -> Array:
    if self.classifier not in ('map', 'token_map'):
      return super()._pool(x)
    t = self.transformer
    # timm's AttentionPoolLatent: exact GELU, over every token (the prefix ones too).
    return models_transformer.MAPHead(
        mlp_dim=self.map_mlp_dim or t['mlp_dim'], num_heads=self.map_heads or t['num_heads'],
        activation='gelu', layer_norm_eps=self.layer_norm_eps, dtype=self.dtype,
        param_dtype=self.param_dtype, name='MAPHead_0')(x)

