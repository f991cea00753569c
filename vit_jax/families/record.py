"""The `Family` record and the token geometry several families share (no jax, no vit_jax import).

docs/architecture.md, "Model families", shows the record and who reads each field.
"""

import dataclasses
import importlib
import math
from typing import Any, Callable, Mapping, Optional, Sequence, Tuple

import ml_collections


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
    module: 'vit_jax.families.<name>.model.Class' of its Flax module, resolved by
      `models.get_model`.
    shape_reader: 'package.module.NAME' of its `shape_readers.ShapeReader`, resolved by
      `weights.architecture` (the reader of its files' shapes).
    flops: 'package.module.NAME' of its `families.flops.FlopsCounter`, or None when only XLA
      counts it (`flops --xla`).
    resnet_root: whether its model has the official ResNet root before the patch embedding
      (a config's `resnet` field: what FLOPs, shape comparison and custom names count).
    augreg: whether its presets were published as AugReg checkpoints (`AUGREG_CONFIGS`).
    masked_pretraining: whether the masked trainers (MAE, MPP) pretrain it (patches of pixels
      into a plain encoder).
    timm_vit: whether timm's vision_transformer holds its models, so `export_timm` writes them
      (what that writer cannot represent, such as a ResNet root, it still refuses in one line).
    presets: its named model configs (`presets.MODEL_CONFIGS` registers them), from its
      folder's `presets.py`; each declares `family`.
    timm_writer: 'package.module' of its own timm module where timm keeps the family apart
      from its ViT (`export_args`, `export_state`: what `weights.timm.export` writes), or None.
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
  presets: Tuple[ml_collections.ConfigDict, ...] = ()
  timm_writer: Optional[str] = None


def resolve(dotted: str) -> Any:
  """The object a record names ('vit_jax.models_vit.VisionTransformer'), imported on demand.

  Called only by the layer that owns the named object (see `vit_jax.families`).
  """
  module, _, attribute = dotted.rpartition('.')
  return getattr(importlib.import_module(module), attribute)


def ceil_div(hw: Sequence[int], stride: int) -> Tuple[int, int]:
  return math.ceil(hw[0] / stride), math.ceil(hw[1] / stride)


def patch_grid(config: Any, hw: Sequence[int]) -> Tuple[int, int]:
  ph, pw = config['patches']['size']
  return hw[0] // ph, hw[1] // pw


def patch_size(config: Any) -> int:
  return config['patches']['size'][0]


def rounded_up(token_stride: Callable[[Any], int]) -> Callable[[Any, int], int]:
  """A `finetune_resolution`: the target side rounded up to whole tokens (the official 384px:
  392 for /14)."""
  def finetune_resolution(config: Any, target: int) -> int:
    stride = token_stride(config)
    return -(-target // stride) * stride
  return finetune_resolution
