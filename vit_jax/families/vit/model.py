"""Vision Transformer (and hybrid ResNet+ViT) with the official Linen parameter tree.

Defaults reproduce the official `vit_jax` architecture exactly; the extra fields (position
embedding variants, stochastic depth, dtypes, remat, fused attention, and what timm's ViT
families need: exact/quick GELU, LayerScale, register and distillation tokens, a class token
outside the position embedding, norm_pre, fc_norm, a MAP head, a bias-free patch embedding)
are off by default.
"""

from typing import Any, Callable, Dict, Optional, Sequence

import flax.linen as nn
import jax.numpy as jnp

from vit_jax.families.resnet import model as models_resnet
from vit_jax import models_transformer
from vit_jax import ops
from vit_jax import position_embeddings
from vit_jax import presets

Array = jnp.ndarray
Dtype = Any

# 'token_gap': a class token in the sequence, pooled by the mean of the other tokens (MAE);
# 'map': attention pooling by a learned probe (big_vision's MAPHead, SigLIP).
CLASSIFIERS = ('token', 'gap', 'unpooled', 'token_unpooled', 'token_gap', 'map')
CLASS_TOKEN_CLASSIFIERS = presets.CLASS_TOKEN_CLASSIFIERS

# The official code's names for the encoder's modules, defined in `models_transformer`.
MlpBlock = models_transformer.MlpBlock
Encoder1DBlock = models_transformer.Encoder1DBlock
Encoder = models_transformer.Encoder


class VisionTransformer(nn.Module):
  """ViT (optionally with a ResNet root) as in the official code: `VisionTransformer(
  num_classes=N, **preset)` with `__call__(inputs, *, train)` on NHWC images in [-1, 1].

  Attributes:
    num_classes: outputs of the zero-initialised `head`; 0 or None for no head.
    patches: ConfigDict/dict with `size` (patch height, width).
    transformer: dict of `Encoder` fields (num_layers, mlp_dim, num_heads, dropout rates).
    hidden_size: token width.
    resnet: None, or dict with `num_layers` (units per stage) and `width_factor`.
    representation_size: width of the tanh `pre_logits` layer, or None for none.
    classifier: 'token', 'gap', 'unpooled', 'token_unpooled', 'token_gap' (class token, mean
      of the other tokens: MAE) or 'map' (attention pooling: SigLIP).
    head_bias_init: constant for the head bias (-10 for sigmoid pretraining as in big_vision).
    posemb: 'learn' (official), 'learn_2d', 'sincos2d', 'relative' (the paper's Appendix D.4:
      a learned key per 2-D patch offset in every block, its query logits a bias on the
      attention; `position_embeddings.RelativePositionKeys`), 'rope' (rotary, axial: every
      block rotates queries and keys by the patch's row and column), 'rope_mixed' (rotary with
      learned per-head frequencies, each block's `rope_freqs`) or 'none'.
    stochastic_depth: maximal drop-path rate (last block); 0 disables it.
    dtype: compute dtype (e.g. jnp.bfloat16); params stay in `param_dtype`.
    remat: rematerialise each encoder block in the backward pass (saves activation memory).
    attention_impl: 'xla' (Flax's einsum-softmax-einsum), 'fused' (jax.nn.dot_product_attention;
      cuDNN flash attention on NVIDIA GPUs in bf16/fp16) or 'heads_first'
      (`heads_first_attention`, same maths reordered; fastest on CPU).
    pad_tokens: pad the token sequence once, before the encoder blocks, to a multiple of this
      (the padding is masked out of every attention and dropped after the blocks, so values are
      unchanged); 0 = off. 8 gives cuDNN an aligned length instead of its pad in every layer.
    activation: MLP activation: 'gelu_tanh' (official), 'gelu' (exact, timm) or 'quick_gelu'.
    layer_norm_eps: epsilon of every LayerNorm (1e-6 official; timm's CLIP towers 1e-5).
    layer_scale: init value of per-channel LayerScale on both residual branches; 0 = none.
    num_registers: learned register tokens `reg` after the class token (DINOv2 reg4).
    no_embed_class: the position table covers the patch grid only; prefix tokens get none.
    distilled: a distillation token `dist` and its own `head_dist`; the output is the mean of
      both heads (timm's DeiT at evaluation).
    norm_pre: a LayerNorm `norm_pre` before the first block (CLIP).
    fc_norm: LayerNorm `fc_norm` after pooling instead of `encoder_norm` before it.
    patch_bias: whether the patch embedding has a bias (CLIP's has none).
  """

  num_classes: Optional[int]
  patches: Any
  transformer: Any
  hidden_size: int
  resnet: Optional[Any] = None
  representation_size: Optional[int] = None
  classifier: str = 'token'
  head_bias_init: float = 0.
  model_name: Optional[str] = None
  family: str = 'vit'  # 'vit' or 'hybrid' (with `resnet`): what `presets.family_of` reads.
  posemb: str = 'learn'
  stochastic_depth: float = 0.
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32
  remat: bool = False
  attention_impl: str = 'xla'
  pad_tokens: int = 0
  activation: str = 'gelu_tanh'
  layer_norm_eps: float = 1e-6
  layer_scale: float = 0.
  num_registers: int = 0
  no_embed_class: bool = False
  distilled: bool = False
  norm_pre: bool = False
  fc_norm: bool = False
  patch_bias: bool = True

  # The pooling kinds this class runs (a family's subclass may run others).
  classifier_choices = CLASSIFIERS

  def __post_init__(self):
    _check_choice('classifier', self.classifier, self.classifier_choices)
    _check_choice('posemb', self.posemb, position_embeddings.POSEMB_KINDS)
    _check_choice('attention_impl', self.attention_impl, tuple(ops.ATTENTION_FNS))
    _check_choice('activation', self.activation, tuple(ops.ACTIVATIONS))
    if self.posemb in position_embeddings.ROPE_KINDS and self.transformer is not None:
      position_embeddings.check_rope_head_dim(
          self.hidden_size // self.transformer['num_heads'], self.posemb)
    if self.distilled and (self.classifier != 'token' or self.representation_size is not None):
      raise ValueError('distilled=True needs classifier=token and no representation_size '
                       '(DeiT pools the class and distillation tokens into two heads).')
    super().__post_init__()

  @nn.compact
  def __call__(self, inputs: Array, *, train: bool,
               corrupt: Optional[Callable[[Array], Array]] = None,
               keep: Optional[Array] = None) -> Array:
    """Logits (or features without a head) of NHWC `inputs`.

    The two hooks of masked pretraining (`models_masked`), both off by default: `corrupt` maps
    the (batch, patches, hidden) patch embeddings before the position embeddings are added
    (MPP's [mask] token); `keep` (batch, k) are the indices of the only patch tokens the blocks
    see (MAE's visible patches).
    """
    x = inputs.astype(self.dtype)
    if self.resnet is not None:
      x = models_resnet.apply_resnet(
          x, width_factor=self.resnet['width_factor'], num_layers=self.resnet['num_layers'],
          dtype=self.dtype, param_dtype=self.param_dtype)
    patch = tuple(self.patches['size'])
    _check_divisible(x.shape[1:3], patch, hybrid=self.resnet is not None)
    x = nn.Conv(self.hidden_size, patch, strides=patch, padding='VALID', dtype=self.dtype,
                param_dtype=self.param_dtype, use_bias=self.patch_bias, name='embedding')(x)
    if self.transformer is not None:
      n, h, w, c = x.shape
      x = x.reshape(n, h * w, c)
      if corrupt is not None:  # Masked patch prediction: before the position embeddings.
        x = corrupt(x)
      x = self._encoder()(x, train=train, grid_shape=(h, w),
                          prefix=self._prefix_tokens(n, c), keep=keep)
    x = self._pool(x)
    if self.fc_norm:
      x = nn.LayerNorm(epsilon=self.layer_norm_eps, param_dtype=self.param_dtype,
                       name='fc_norm')(x)
    if self.distilled:
      return self._distilled_heads(x)
    x = self.sow_features('pre_logits_input', x)
    if self.representation_size is not None:
      x = nn.tanh(nn.Dense(self.representation_size, param_dtype=self.param_dtype,
                           name='pre_logits')(x))
    x = self.sow_features('pre_logits', x)
    if self.num_classes:
      x = self._head('head')(x)
    return x.astype(jnp.float32)

  def _encoder(self) -> nn.Module:
    """The encoder the blocks run in; a family with blocks of its own (EVA) builds its
    encoder subclass here from the same fields."""
    return models_transformer.Encoder(name='Transformer', **self._encoder_fields())

  def _encoder_fields(self) -> Dict[str, Any]:
    return dict(posemb=self.posemb, stochastic_depth=self.stochastic_depth, remat=self.remat,
                attention_impl=self.attention_impl, pad_tokens=self.pad_tokens,
                dtype=self.dtype, param_dtype=self.param_dtype, activation=self.activation,
                layer_norm_eps=self.layer_norm_eps, layer_scale=self.layer_scale,
                no_embed_class=self.no_embed_class, norm_pre=self.norm_pre,
                final_norm=not self.fc_norm, **self.transformer)

  def _head(self, name: str) -> nn.Dense:
    return nn.Dense(self.num_classes, kernel_init=nn.initializers.zeros,
                    bias_init=nn.initializers.constant(self.head_bias_init),
                    param_dtype=self.param_dtype, name=name)

  def _prefix_tokens(self, batch: int, width: int) -> Optional[Array]:
    """(batch, prefix, width) learned tokens before the grid: cls, dist, registers; or None."""
    tokens = []
    if self.classifier in CLASS_TOKEN_CLASSIFIERS:
      tokens.append(self.param('cls', nn.initializers.zeros, (1, 1, width), self.param_dtype))
    if self.distilled:
      tokens.append(self.param('dist', nn.initializers.zeros, (1, 1, width), self.param_dtype))
    if self.num_registers:
      tokens.append(self.param('reg', nn.initializers.zeros, (1, self.num_registers, width),
                               self.param_dtype))
    if not tokens:
      return None
    prefix = jnp.concatenate(tokens, axis=1).astype(self.dtype)
    return jnp.tile(prefix, (batch, 1, 1))

  def _distilled_heads(self, tokens: Array) -> Array:
    """DeiT: `head` on the class token, `head_dist` on the distillation token, averaged."""
    pooled = self.sow_features('pre_logits_input', (tokens[:, 0] + tokens[:, 1]) / 2)
    self.sow_features('pre_logits', pooled)
    if not self.num_classes:
      return pooled.astype(jnp.float32)
    head = self._head('head')(tokens[:, 0]).astype(jnp.float32)
    head_dist = self._head('head_dist')(tokens[:, 1]).astype(jnp.float32)
    # Each head on its own, for DeiT training (`distill.head_logits`): class head on the labels,
    # distillation head on the teacher.
    self.sow_features('head_logits', head)
    self.sow_features('head_dist_logits', head_dist)
    return (head + head_dist) / 2

  def sow_features(self, name: str, x: Array) -> Array:
    """Records `x` in the 'intermediates' collection when it is mutable (for feature tools)."""
    self.sow('intermediates', name, x)
    return x

  @property
  def num_prefix_tokens(self) -> int:
    """Tokens before the patch grid in the sequence (class, distillation, registers)."""
    return presets.prefix_token_count(self.classifier, self.distilled, self.num_registers)

  def _pool(self, x: Array) -> Array:
    if self.classifier == 'token':
      return x[:, :2] if self.distilled else x[:, 0]
    if self.classifier in ('gap', 'token_gap'):  # Prefix tokens are not averaged (as timm).
      if x.ndim == 3:
        x = x[:, self.num_prefix_tokens:]
      return jnp.mean(x, axis=tuple(range(1, x.ndim - 1)))
    if self.classifier == 'map':
      t = self.transformer
      return models_transformer.MAPHead(
          mlp_dim=t['mlp_dim'], num_heads=t['num_heads'], activation=self.activation,
          layer_norm_eps=self.layer_norm_eps, dtype=self.dtype, param_dtype=self.param_dtype,
          name='MAPHead_0')(x)
    return x


def _check_choice(field: str, value: str, choices: Sequence[str]) -> None:
  if value not in choices:
    raise ValueError(f'Unknown {field}={value!r}; choose one of {", ".join(choices)}.')


def _check_divisible(spatial: Sequence[int], patch: Sequence[int], *, hybrid: bool) -> None:
  h, w = spatial
  if h % patch[0] or w % patch[1]:
    where = 'the ResNet feature map' if hybrid else 'the image'
    raise ValueError(
        f'{where} size {h}x{w} is not divisible by the patch size {patch[0]}x{patch[1]}; '
        f'use an image size (pp.crop) that is a multiple of {patch[0]}.')
