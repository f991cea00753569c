"""FLOPs of the official ResNet root and bottleneck stages: a hybrid's root (the ResNet
family's own models are counted by XLA only, `flops --xla`)."""

from typing import Any, Tuple

from vit_jax.families.flops import conv_flops, strided


def resnet_flops(resnet: Any, image_hw: Tuple[int, int]) -> Tuple[int, Tuple[int, int], int]:
  """FLOPs of a hybrid's ResNet-v2 root and bottleneck stages (see `models_resnet`).

  Returns:
    (flops, output (h, w), output channels).
  """
  width = int(64 * resnet['width_factor'])
  hw = strided(image_hw, 2)
  flops = conv_flops(hw, (7, 7), 3, width)  # conv_root, stride 2.
  hw, channels = strided(hw, 2), width  # 3x3/2 max-pool: no MACs.
  for stage, units in enumerate(resnet['num_layers']):
    features = width * 2**stage
    for unit in range(units):
      stride = 2 if stage > 0 and unit == 0 else 1
      out_hw = strided(hw, stride)
      flops += conv_flops(hw, (1, 1), channels, features)  # conv1
      flops += conv_flops(out_hw, (3, 3), features, features)  # conv2 (strided)
      flops += conv_flops(out_hw, (1, 1), features, 4 * features)  # conv3
      if channels != 4 * features or stride != 1:
        flops += conv_flops(out_hw, (1, 1), channels, 4 * features)  # conv_proj
      hw, channels = out_hw, 4 * features
  return flops, hw, channels
