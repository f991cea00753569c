"""The ResNet classifier presets: BiT's R50x1 layout, the small-image roots, and ResNet-18."""

from typing import Sequence

import ml_collections

# The residual units a ResNet can stack (`model.UNIT_MODULES`). The first is what a config
# without `unit` means: every ResNet preset before ResNet-18, and every hybrid's root.
UNITS = ('bottleneck', 'basic')


def unit_field(unit: str) -> dict:
  """`unit` as a config field: absent for the bottleneck, so a bottleneck ResNet's config stays
  what it was before ResNet-18 and runs recorded then resume (run_record compares configs field
  by field)."""
  return {} if unit == UNITS[0] else dict(unit=unit)


def resnet(name: str, stage_sizes: Sequence[int], width_factor: float, *, root_kernel: int = 7,
           root_stride: int = 2, root_pool: bool = True,
           unit: str = UNITS[0]) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      model_name=name, family='resnet', stage_sizes=tuple(stage_sizes),
      width_factor=float(width_factor), root_kernel=root_kernel, root_stride=root_stride,
      root_pool=root_pool, **unit_field(unit)))


PRESETS = (
    # BiT-R50x1's stages and widths: 4x root (7x7/2 conv, 3x3/2 pool) × 2 × 2 × 2 → 32x.
    resnet('ResNet-50', (3, 4, 6, 3), 1),
    # The CIFAR ResNet's root (3x3/1 conv, no pool) for 32px: 32 → 32, 16, 8, 4 over the stages.
    resnet('ResNet-50_32px', (3, 4, 6, 3), 1, root_kernel=3, root_stride=1, root_pool=False),
    # Fashion-MNIST: 3x3/1 conv + 3x3/2 pool, then 14, 7, 4; widths 32/64/128 (GroupNorm needs
    # 32 channels). 0.50M params and 37 MFLOPs at 28px (XLA's count) against ViT-FMNIST_7's
    # 0.55M and 19 MFLOPs (configs/fashion_mnist_quickstart.py).
    resnet('ResNet-11_28px', (1, 1, 1), 0.5, root_kernel=3, root_stride=1),
    # ResNet-18 (He et al. 2016, torchvision's layout: basic units (2, 2, 2, 2) of widths
    # 64-512) with the CIFAR root (3x3/1 conv, no pool) for 28-32px: 28 → 28, 14, 7, 4. 11.17M
    # params with 10 classes, as torchvision's resnet18 with that root; GroupNorm + weight
    # standardisation where it has BatchNorm (the same parameter count).
    resnet('ResNet-18_28px', (2, 2, 2, 2), 1, root_kernel=3, root_stride=1, root_pool=False,
           unit='basic'),
)
