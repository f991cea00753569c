"""The Swin presets (Liu et al. 2021, timm's swin_*_patch4_window{7_224,12_384}), named
name_patch_window, and two small ones."""

from typing import Sequence

import ml_collections


def swin(name: str, patch: int, embed_dim: int, depths: Sequence[int], heads: Sequence[int],
         window: int) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      model_name=name, family='swin',
      patches=ml_collections.ConfigDict({'size': (patch, patch)}), embed_dim=embed_dim,
      depths=tuple(depths), num_heads=tuple(heads), window_size=window, mlp_ratio=4.))


PRESETS = (
    # The window divides the last stage exactly at the published resolution (224/32 = 7,
    # 384/32 = 12), which `finetune_resolution` returns.
    swin('Swin-T_4_7', 4, 96, (2, 2, 6, 2), (3, 6, 12, 24), 7),
    swin('Swin-S_4_7', 4, 96, (2, 2, 18, 2), (3, 6, 12, 24), 7),
    swin('Swin-B_4_7', 4, 128, (2, 2, 18, 2), (4, 8, 16, 32), 7),
    swin('Swin-B_4_12', 4, 128, (2, 2, 18, 2), (4, 8, 16, 32), 12),
    swin('Swin-L_4_7', 4, 192, (2, 2, 18, 2), (6, 12, 24, 48), 7),
    swin('Swin-L_4_12', 4, 192, (2, 2, 18, 2), (6, 12, 24, 48), 12),
    # Tests: 32px → an 8x8 grid of 2x2 windows of 4 (W-MSA + SW-MSA), then 4x4 (one window).
    swin('Swin-testing', 4, 16, (2, 2), (2, 4), 4),
    # Fashion-MNIST at 28px: 2x2 patches → 14x14 (2x2 windows of 7, shifted in every other
    # block), 7x7 (one window), 4x4; widths 32/64/128, about the study ViT's 0.55M parameters.
    swin('Swin-FMNIST_2_7', 2, 32, (2, 2, 2), (2, 4, 8), 7),
)
