"""The ResNet+ViT hybrid presets: the ViT's constructor with the official ResNet root."""

from vit_jax.families.vit.presets import B, L, S, TI, vit

PRESETS = (
    # Root only: the 7x7/2 conv and 3x3/2 max-pool downscale 4x before the 8x8 patches.
    vit('R+ViT-Ti_16', 8, *TI, resnet=((), 1)),
    # (3, 4, 9) units: 4x root × 2 × 2 → 16x downscaling, 1x1 "patches" → effective /16.
    vit('R50+ViT-B_16', 1, *B, dropout=0.1, resnet=((3, 4, 9), 1)),
    # Four stages: 4x root × 2 × 2 × 2 → 32x downscaling → effective /32.
    vit('R26+ViT-S_32', 1, *S, resnet=((2, 2, 2, 2), 1)),
    vit('R26+ViT-B_32', 1, *B, resnet=((2, 2, 2, 2), 1)),
    vit('R50+ViT-L_32', 1, *L, dropout=0.1, resnet=((3, 4, 6, 3), 1)),
)
