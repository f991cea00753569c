"""The ResNet+ViT hybrid's record: a ViT whose patches are cut from the official ResNet root.

It shares the ViT's module, extras, reader and counter (`families/vit/`; the root is
`families/resnet/`'s); what differs is its geometry (the root's strides before the patch grid)
and its runlocal root.
"""

from typing import Any, Sequence, Tuple

import ml_collections

from vit_jax.families import vit
from vit_jax.families.hybrid.presets import PRESETS, WEIGHTS
from vit_jax.families.record import Family, ceil_div, patch_grid, patch_size, rounded_up


def _root_steps(config: Any) -> int:
  # The root's stride-2 conv and stride-2 max-pool, then 2x per stage after the first.
  return 2 + max(len(config['resnet']['num_layers']) - 1, 0)


def _grid(config: Any, hw: Sequence[int]) -> Tuple[int, int]:
  for _ in range(_root_steps(config)):  # SAME padding throughout.
    hw = ceil_div(hw, 2)
  return patch_grid(config, hw)


def _stride(config: Any) -> int:
  return patch_size(config) * 2**_root_steps(config)


def shrink(model: ml_collections.ConfigDict) -> None:
  vit.shrink(model)  # One unit per stage, GroupNorm's 32 channels at least.
  model.resnet = ml_collections.ConfigDict(dict(
      num_layers=(1,) * len(model.resnet.num_layers), width_factor=.5))


FAMILY = Family('hybrid', 'ResNet+ViT hybrid', vit.EXTRAS, True,
                token_stride=_stride, token_grid=_grid, finetune_resolution=rounded_up(_stride),
                input_multiple=lambda c: 1, shrink=shrink,
                module='vit_jax.families.vit.model.VisionTransformer',
                shape_reader='vit_jax.families.vit.shapes.READER',
                flops='vit_jax.families.vit.flops.COUNTER', resnet_root=True, augreg=True,
                timm_vit=True, presets=PRESETS, weights=WEIGHTS)
