"""The `Family` record and the token geometry several families share (no jax, no vit_jax import).

docs/architecture.md, "Model families", shows the record and who reads each field.
"""

import dataclasses
import importlib
import math
from typing import Any, Callable, Mapping, Optional, Sequence, Tuple

import ml_collections


@dataclasses.dataclass(frozen=True)
class Weights:
  """One published weight of a preset, declared as timm's `default_cfgs` declare theirs.

  Attributes:
    name: how the tools name it, '<collection>/<file stem>' ('imagenet21k/ViT-B_16').
    preset: the preset whose model it holds.
    source: where it is published (gs://, also readable over https).
    image_size: the square resolution it was trained (or fine-tuned) at.
    num_classes: outputs of its head.
    trained_on: the data, in words.
    mean: per-channel mean of the [0, 1] input it expects (the official x / 127.5 - 1).
    std: per-channel std of the same.
  """

  name: str
  preset: str
  source: str
  image_size: int
  num_classes: int
  trained_on: str
  mean: Tuple[float, float, float] = (0.5, 0.5, 0.5)
  std: Tuple[float, float, float] = (0.5, 0.5, 0.5)


def published(collection: str, folder: str, trained_on: str, image_size: int,
              num_classes: int, files: Sequence[Tuple[str, str]]) -> Tuple[Weights, ...]:
  """The weights of one published folder: (preset, file stem) pairs at one size and head."""
  return tuple(Weights(f'{collection}/{stem}', preset, f'{folder}/{stem}.npz', image_size,
                       num_classes, trained_on) for preset, stem in files)


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
    weights: its presets' published weights (`Weights`: source, size, head, data, mean/std),
      from its folder's `presets.py`; `presets.PUBLISHED_WEIGHTS` lists every family's. Weights
      timm publishes carry the same in their config.json (`pretrained_cfg`).
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
  weights: Tuple[Weights, ...] = ()


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
