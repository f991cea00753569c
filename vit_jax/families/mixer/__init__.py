"""The MLP-Mixer family: its record here (patch-grid geometry, runlocal size; no FLOPs counter:
XLA's), `model.py` (`MlpMixer`) and `shapes.py` (`READER`) beside it."""

import ml_collections

from vit_jax.families.mixer.presets import PRESETS, WEIGHTS
from vit_jax.families.record import Family, patch_grid, patch_size, rounded_up


def shrink(model: ml_collections.ConfigDict) -> None:
  model.update(dict(hidden_dim=16, num_blocks=1, tokens_mlp_dim=8, channels_mlp_dim=16))


FAMILY = Family('mixer', 'Mixer', {}, False,
                token_stride=patch_size, token_grid=patch_grid,
                finetune_resolution=rounded_up(patch_size), input_multiple=patch_size,
                shrink=shrink,
                module='vit_jax.families.mixer.model.MlpMixer',
                shape_reader='vit_jax.families.mixer.shapes.READER', flops=None,
                presets=PRESETS, weights=WEIGHTS)
