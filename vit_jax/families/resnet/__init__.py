"""The ResNet family: its record here (SAME-padded strides, so any input size; runlocal size),
`model.py` (`ResNet`, and the official root a hybrid builds on), `shapes.py` (`READER`, and
`root_fields` for a hybrid's root) and `flops.py` (the root's count, for the hybrid's counter)."""

import math
from typing import Any, Sequence, Tuple

import ml_collections

from vit_jax.families.resnet.presets import PRESETS
from vit_jax.families.record import Family, ceil_div

# Fields beyond the preset's (a ResNet has no dropout, attention or position embeddings).
EXTRAS = dict(
    dtype='float32',  # Compute dtype; 'bfloat16' for accelerators (params stay float32).
)


def _strides(config: Any) -> Sequence[int]:
  # SAME padding throughout: the root conv, the 3x3/2 pool, then 2x per stage after the 1st.
  return [config['root_stride']] + [2] * (
      bool(config['root_pool']) + max(len(config['stage_sizes']) - 1, 0))


def _grid(config: Any, hw: Sequence[int]) -> Tuple[int, int]:
  for stride in _strides(config):
    hw = ceil_div(hw, stride)
  return tuple(hw)


def shrink(model: ml_collections.ConfigDict) -> None:
  # One unit per stage, GroupNorm's 32 channels at least.
  model.update(dict(stage_sizes=(1,) * len(model.stage_sizes), width_factor=.5))


# Any size works: SAME padding and global average pooling.
FAMILY = Family('resnet', 'ResNet', EXTRAS, False,
                token_stride=lambda c: math.prod(_strides(c)), token_grid=_grid,
                finetune_resolution=lambda c, target: target, input_multiple=lambda c: 1,
                shrink=shrink,
                module='vit_jax.families.resnet.model.ResNet',
                shape_reader='vit_jax.families.resnet.shapes.READER', flops=None,
                presets=PRESETS)
