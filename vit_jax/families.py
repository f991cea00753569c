"""The model families, one record each: adding a family is one `Family` in `FAMILIES`.

A record declares everything the package does differently per family: its preset defaults
(`extras`), its token geometry, its `runlocal` size, and by name the pieces that live in the
layer that owns them: its Flax module (models), the reader that describes its files from their
shapes (weights) and its analytic FLOPs counter (tools). This module is the lowest layer
(no jax, no other vit_jax import): a name is resolved by the layer that owns the named object
(`models.get_model`, `weights.architecture.architecture`, `tools.flops.count_flops`), never
here, so no import runs back up. docs/architecture.md, "Model families", shows the record.
"""

import dataclasses
import importlib
import math
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

import ml_collections

# Fields beyond the official ones, each off by default (defaults = official behaviour).
VIT_EXTRAS = dict(
    posemb='learn',  # 'learn' (official 1-D), 'learn_2d', 'sincos2d', 'relative' or 'none'.
    stochastic_depth=0.,  # Max drop-path rate (last block); 0 = off.
    dtype='float32',  # Compute dtype; 'bfloat16' for accelerators (params stay float32).
    remat=False,  # Recompute each block in backward: less activation memory.
    attention_impl='xla',  # 'heads_first' (fastest on CPU) or 'fused' (cuDNN flash on GPU).
    pad_tokens=0,  # Pad tokens once, before the blocks, to a multiple of this (masked); 0 = off.
    head_bias_init=0.,  # -10 for sigmoid pretraining (big_vision i21k).
    # What timm's ViT families need (weights/timm_vit.py reads their files); all off here.
    activation='gelu_tanh',  # MLP activation: 'gelu_tanh' (official), 'gelu' (exact), 'quick_gelu'.
    layer_norm_eps=1e-6,  # LayerNorm epsilon (timm's CLIP towers: 1e-5).
    layer_scale=0.,  # LayerScale init value (DeiT-III 1e-6, DINOv2 1e-5); 0 = no LayerScale.
    num_registers=0,  # Register tokens after the class token (DINOv2 reg4: 4).
    no_embed_class=False,  # Position table for the patch grid only (DeiT-III, DINOv2 reg).
    distilled=False,  # DeiT distillation token + head_dist; output = mean of both heads.
    norm_pre=False,  # LayerNorm before the first block (CLIP).
    fc_norm=False,  # LayerNorm after pooling instead of before (MAE-style pooled models).
    patch_bias=True,  # Bias of the patch embedding (CLIP has none).
)

# The same for `ResNet` presets (it has no dropout, attention or position embeddings).
RESNET_EXTRAS = dict(
    dtype='float32',  # Compute dtype; 'bfloat16' for accelerators (params stay float32).
)

# The same for Swin presets: timm's default drop-path rate (its published configs fine-tune
# with 0.1-0.2) and the compute dtype.
SWIN_EXTRAS = dict(
    stochastic_depth=0.1,  # Drop-path rate of the last block, linear from 0; 0 = off.
    dtype='float32',  # Compute dtype; 'bfloat16' for accelerators (params stay float32).
)


@dataclasses.dataclass(frozen=True)
class Family:
  """Everything the package does differently for one model family.

  Attributes:
    name: the value of a model config's `family` field.
    title: how messages name it ("family Mixer in the file, ViT in ViT-B_16").
    extras: the fields beyond the preset's that `config_lib.with_model` adds, at their defaults.
    has_prefix_tokens: whether class/distillation/register tokens can precede its patch grid.
    token_stride: model config → input pixels per token (per cell of the last feature map).
    token_grid: (model config, (height, width)) → (rows, cols) of its last token grid.
    finetune_resolution: (model config, target side) → its fine-tuning resolution.
    input_multiple: model config → what the input side must be a multiple of (its patch size;
      1 where SAME padding takes any size).
    shrink: makes a model config the `runlocal` size (one block, width 16) in place.
    module: 'package.module.Class' of its Flax module, resolved by `models.get_model`.
    shape_reader: 'package.module.NAME' of its `shape_readers.ShapeReader`, resolved by
      `weights.architecture` (the reader of its files' shapes).
    flops: 'package.module.NAME' of its `tools.flops.FlopsCounter`, or None when only XLA
      counts it (`flops --xla`).
    resnet_root: whether its model has the official ResNet root before the patch embedding
      (a config's `resnet` field: what FLOPs, shape comparison and custom names count).
    augreg: whether its presets were published as AugReg checkpoints (`AUGREG_CONFIGS`).
    masked_pretraining: whether the masked trainers (MAE, MPP) pretrain it (patches of pixels
      into a plain encoder).
    timm_vit: whether timm's vision_transformer holds its models, so `export_timm` writes them
      (what that writer cannot represent, such as a ResNet root, it still refuses in one line).
  """

  name: str
  title: str
  extras: Mapping[str, Any]
  has_prefix_tokens: bool
  token_stride: Callable[[Any], int]
  token_grid: Callable[[Any, Sequence[int]], Tuple[int, int]]
  finetune_resolution: Callable[[Any, int], int]
  input_multiple: Callable[[Any], int]
  shrink: Callable[[ml_collections.ConfigDict], None]
  module: str
  shape_reader: str
  flops: Optional[str]
  resnet_root: bool = False
  augreg: bool = False
  masked_pretraining: bool = False
  timm_vit: bool = False


def resolve(dotted: str) -> Any:
  """The object a record names ('vit_jax.models_vit.VisionTransformer'), imported on demand.

  Called only by the layer that owns the named object (see the module docstring).
  """
  module, _, attribute = dotted.rpartition('.')
  return getattr(importlib.import_module(module), attribute)


def _ceil_div(hw: Sequence[int], stride: int) -> Tuple[int, int]:
  return math.ceil(hw[0] / stride), math.ceil(hw[1] / stride)


def _patch_grid(config: Any, hw: Sequence[int]) -> Tuple[int, int]:
  ph, pw = config['patches']['size']
  return hw[0] // ph, hw[1] // pw


def _round_up(config: Any, target: int) -> int:
  """The target side rounded up to whole tokens (the official 384px: 392 for /14)."""
  stride = FAMILIES[config['family']].token_stride(config)
  return -(-target // stride) * stride


def _patch_size(config: Any) -> int:
  return config['patches']['size'][0]


def _hybrid_root_steps(config: Any) -> int:
  # The root's stride-2 conv and stride-2 max-pool, then 2x per stage after the first.
  return 2 + max(len(config['resnet']['num_layers']) - 1, 0)


def _hybrid_grid(config: Any, hw: Sequence[int]) -> Tuple[int, int]:
  for _ in range(_hybrid_root_steps(config)):  # SAME padding throughout.
    hw = _ceil_div(hw, 2)
  return _patch_grid(config, hw)


def _resnet_strides(config: Any) -> Sequence[int]:
  # SAME padding throughout: the root conv, the 3x3/2 pool, then 2x per stage after the 1st.
  return [config['root_stride']] + [2] * (
      bool(config['root_pool']) + max(len(config['stage_sizes']) - 1, 0))


def _resnet_grid(config: Any, hw: Sequence[int]) -> Tuple[int, int]:
  for stride in _resnet_strides(config):
    hw = _ceil_div(hw, stride)
  return tuple(hw)


def _swin_stride(config: Any) -> int:  # Patch merging halves the grid at every later stage.
  return config['patches']['size'][0] * 2**(len(config['depths']) - 1)


def _swin_grid(config: Any, hw: Sequence[int]) -> Tuple[int, int]:
  hw = _patch_grid(config, hw)
  for _ in range(len(config['depths']) - 1):  # Odd sides padded before merging.
    hw = _ceil_div(hw, 2)
  return hw


def _shrink_vit(model: ml_collections.ConfigDict) -> None:
  model.hidden_size = 16
  model.transformer.update(dict(num_layers=1, num_heads=2, mlp_dim=16))
  if model.representation_size is not None:
    model.representation_size = 16


def _shrink_hybrid(model: ml_collections.ConfigDict) -> None:
  _shrink_vit(model)  # One unit per stage, GroupNorm's 32 channels at least.
  model.resnet = ml_collections.ConfigDict(dict(
      num_layers=(1,) * len(model.resnet.num_layers), width_factor=.5))


def _shrink_mixer(model: ml_collections.ConfigDict) -> None:
  model.update(dict(hidden_dim=16, num_blocks=1, tokens_mlp_dim=8, channels_mlp_dim=16))


def _shrink_swin(model: ml_collections.ConfigDict) -> None:
  stages = len(model.depths)  # A W-MSA + SW-MSA pair in the first stage, one block after.
  model.update(dict(embed_dim=16, depths=(2,) + (1,) * (stages - 1), num_heads=(2,) * stages))


def _shrink_resnet(model: ml_collections.ConfigDict) -> None:
  # One unit per stage, GroupNorm's 32 channels at least.
  model.update(dict(stage_sizes=(1,) * len(model.stage_sizes), width_factor=.5))


def _register(*records: Family) -> Dict[str, Family]:
  return {record.name: record for record in records}


# A new family adds its record here (and its module, reader and counter where the names point).
FAMILIES: Dict[str, Family] = _register(
    Family('vit', 'ViT', VIT_EXTRAS, True,
           token_stride=_patch_size, token_grid=_patch_grid,
           finetune_resolution=_round_up, input_multiple=_patch_size, shrink=_shrink_vit,
           module='vit_jax.models_vit.VisionTransformer',
           shape_reader='vit_jax.weights.shape_readers.VIT_READER',
           flops='vit_jax.tools.flops.VIT_FLOPS', augreg=True, masked_pretraining=True,
           timm_vit=True),
    Family('hybrid', 'ResNet+ViT hybrid', VIT_EXTRAS, True,
           token_stride=lambda c: _patch_size(c) * 2**_hybrid_root_steps(c),
           token_grid=_hybrid_grid, finetune_resolution=_round_up,
           input_multiple=lambda c: 1, shrink=_shrink_hybrid,
           module='vit_jax.models_vit.VisionTransformer',
           shape_reader='vit_jax.weights.shape_readers.VIT_READER',
           flops='vit_jax.tools.flops.VIT_FLOPS', resnet_root=True, augreg=True, timm_vit=True),
    Family('mixer', 'Mixer', {}, False,
           token_stride=_patch_size, token_grid=_patch_grid,
           finetune_resolution=_round_up, input_multiple=_patch_size, shrink=_shrink_mixer,
           module='vit_jax.models_mixer.MlpMixer',
           shape_reader='vit_jax.weights.shape_readers.MIXER_READER', flops=None),
    # Its published resolution: the last stage is one window.
    Family('swin', 'Swin', SWIN_EXTRAS, False, token_stride=_swin_stride, token_grid=_swin_grid,
           finetune_resolution=lambda c, target: c['window_size'] * _swin_stride(c),
           input_multiple=_patch_size, shrink=_shrink_swin,
           module='vit_jax.models_swin.SwinTransformer',
           shape_reader='vit_jax.weights.shape_readers.SWIN_READER',
           flops='vit_jax.tools.flops.SWIN_FLOPS'),
    # Any size works: SAME padding and global average pooling.
    Family('resnet', 'ResNet', RESNET_EXTRAS, False,
           token_stride=lambda c: math.prod(_resnet_strides(c)), token_grid=_resnet_grid,
           finetune_resolution=lambda c, target: target, input_multiple=lambda c: 1,
           shrink=_shrink_resnet,
           module='vit_jax.models_resnet.ResNet',
           shape_reader='vit_jax.weights.shape_readers.RESNET_READER', flops=None),
)
