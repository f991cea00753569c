"""The ViT presets (the paper's, DeiT's Ti and S, the gap-norep variants) and `vit`, the
constructor of every ViT and hybrid preset (no jax: configs read these)."""

from typing import Optional, Sequence, Tuple

import ml_collections

from vit_jax.families.record import published


def vit(name: str, patch: int, hidden: int, mlp: int, heads: int, layers: int, *,
        dropout: float = 0., classifier: str = 'token', representation_size=None,
        resnet: Optional[Tuple[Sequence[int], float]] = None) -> ml_collections.ConfigDict:
  """The ViT ConfigDict with exactly the official fields: every preset and `small_vit`.

  `resnet` = (units per stage, width factor) makes it a hybrid with the official ResNet root.
  """
  config = ml_collections.ConfigDict()
  config.model_name = name
  config.family = 'vit' if resnet is None else 'hybrid'
  config.patches = ml_collections.ConfigDict({'size': (patch, patch)})
  config.hidden_size = hidden
  config.transformer = ml_collections.ConfigDict(dict(
      mlp_dim=mlp, num_heads=heads, num_layers=layers, attention_dropout_rate=0.,
      dropout_rate=dropout))
  config.classifier = classifier
  config.representation_size = representation_size
  if resnet is not None:
    config.resnet = ml_collections.ConfigDict(
        {'num_layers': tuple(resnet[0]), 'width_factor': resnet[1]})
  return config


# Widths (hidden, mlp, heads, layers) of the paper's Table 1 plus DeiT's Ti and S.
TI, S, B = (192, 768, 3, 12), (384, 1536, 6, 12), (768, 3072, 12, 12)
L, H = (1024, 4096, 16, 24), (1280, 5120, 16, 32)

PRESETS = (
    vit('testing', 16, 10, 10, 2, 1, dropout=0.1),
    vit('testing-unpooled', 16, 10, 10, 2, 1, dropout=0.1, classifier='unpooled'),
    vit('ViT-Ti_16', 16, *TI),
    vit('ViT-S_16', 16, *S),
    vit('ViT-B_16', 16, *B),
    vit('ViT-L_16', 16, *L, dropout=0.1),
    vit('ViT-H_14', 14, *H, dropout=0.1),
    vit('ViT-B_8', 8, *B),
    vit('ViT-S_32', 32, *S),
    vit('ViT-B_32', 32, *B),
    vit('ViT-L_32', 32, *L),
    vit('ViT-S_16-gap-norep', 16, *S, classifier='gap'),
    vit('ViT-B_16-gap-norep', 16, *B, classifier='gap'),
    vit('ViT-S_32-gap-norep', 32, *S, classifier='gap'),
    vit('ViT-B_32-gap-norep', 32, *B, classifier='gap'),
)

_I21K = 'gs://vit_models/imagenet21k'
_I1K = 'gs://vit_models/imagenet21k+imagenet2012'
WEIGHTS = (
    published('imagenet21k', _I21K, 'ImageNet-21k', 224, 21843, [
        (n, n) for n in ('ViT-B_16', 'ViT-B_32', 'ViT-B_8', 'ViT-L_16', 'ViT-L_32', 'ViT-H_14')])
    + published('imagenet21k+imagenet2012', _I1K, 'ImageNet-21k, fine-tuned on ImageNet', 384,
                1000, [(n, n) for n in ('ViT-B_16', 'ViT-B_32', 'ViT-B_8', 'ViT-L_16',
                                        'ViT-L_32')])
    + published('imagenet21k+imagenet2012', _I1K, 'ImageNet-21k, fine-tuned on ImageNet', 224,
                1000, [('ViT-B_16', 'ViT-B_16-224'), ('ViT-L_16', 'ViT-L_16-224')])
    + published('sam', 'gs://vit_models/sam', 'ImageNet, with SAM', 224, 1000, [
        (n, n) for n in ('ViT-B_16', 'ViT-B_32', 'ViT-L_16', 'ViT-L_32', 'ViT-S_16')]))
