"""The Swin Transformer family: its record here (extras, merged-patch geometry, runlocal size;
no jax), and beside it `model.py` (`SwinTransformer`), `shapes.py` (`READER`, whose `fit` hook
resizes the relative-position tables), `timm.py` (timm's Swin weights and those tables) and
`flops.py` (`COUNTER`).
"""

from typing import Any, Sequence, Tuple

import ml_collections

from vit_jax.families.swin.presets import PRESETS
from vit_jax.families.record import Family, ceil_div, patch_grid, patch_size

# timm's default drop-path rate (its published configs fine-tune with 0.1-0.2) and the compute
# dtype.
EXTRAS = dict(
    stochastic_depth=0.1,  # Drop-path rate of the last block, linear from 0; 0 = off.
    dtype='float32',  # Compute dtype; 'bfloat16' for accelerators (params stay float32).
)


def _stride(config: Any) -> int:  # Patch merging halves the grid at every later stage.
  return config['patches']['size'][0] * 2**(len(config['depths']) - 1)


def _grid(config: Any, hw: Sequence[int]) -> Tuple[int, int]:
  hw = patch_grid(config, hw)
  for _ in range(len(config['depths']) - 1):  # Odd sides padded before merging.
    hw = ceil_div(hw, 2)
  return hw


def shrink(model: ml_collections.ConfigDict) -> None:
  stages = len(model.depths)  # A W-MSA + SW-MSA pair in the first stage, one block after.
  model.update(dict(embed_dim=16, depths=(2,) + (1,) * (stages - 1), num_heads=(2,) * stages))


# Its published resolution: the last stage is one window.
FAMILY = Family('swin', 'Swin', EXTRAS, False, token_stride=_stride, token_grid=_grid,
                finetune_resolution=lambda c, target: c['window_size'] * _stride(c),
                input_multiple=patch_size, shrink=shrink,
                module='vit_jax.families.swin.model.SwinTransformer',
                shape_reader='vit_jax.families.swin.shapes.READER',
                flops='vit_jax.families.swin.flops.COUNTER', presets=PRESETS)
