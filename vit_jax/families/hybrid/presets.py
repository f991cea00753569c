"""The ResNet+ViT hybrid presets: the ViT's constructor with the official ResNet root."""

from vit_jax.families.record import published
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
WEIGHTS = (
    published('imagenet21k', 'gs://vit_models/imagenet21k', 'ImageNet-21k', 224, 21843, [
        (n, n) for n in ('R50+ViT-B_16', 'R26+ViT-B_32', 'R50+ViT-L_32')])
    + published('imagenet21k+imagenet2012', 'gs://vit_models/imagenet21k+imagenet2012',
                'ImageNet-21k, fine-tuned on ImageNet', 384, 1000,
                [('R50+ViT-B_16', 'R50+ViT-B_16')]))
