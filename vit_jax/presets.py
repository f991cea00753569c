"""What was published, as data (no jax import): model presets, checkpoint folders, input scale.

`MODEL_CONFIGS[name]` is a locked ConfigDict with exactly the official fields, so
`VisionTransformer(num_classes=N, **MODEL_CONFIGS['ViT-B_16'])` works as in the official repo.
Experiment configs and the checkpoint API read these without importing jax or flax; so do the
token-grid facts of a model config (`token_grid`, `num_prefix_tokens`, `square_side`).
"""

import math
from typing import Any, Dict, Optional, Sequence, Tuple

import ml_collections

from vit_jax import families

MODEL_CONFIGS: Dict[str, ml_collections.ConfigDict] = {}
# AugReg file names use 'S_16' / 'R26_S_32' instead of 'ViT-S_16' / 'R26+ViT-S_32'.
AUGREG_CONFIGS: Dict[str, ml_collections.ConfigDict] = {}
_NO_AUGREG = ('testing', 'testing-unpooled', 'ViT-L_32', 'R50+ViT-B_16', 'ViT-H_14')

# Where the official checkpoints are published (public buckets, readable over https too).
PUBLISHED_DIRS = {
    'imagenet21k': 'gs://vit_models/imagenet21k',
    'imagenet21k+imagenet2012': 'gs://vit_models/imagenet21k+imagenet2012',
    'augreg': 'gs://vit_models/augreg',
    'sam': 'gs://vit_models/sam',
    'mixer-imagenet21k': 'gs://mixer_models/imagenet21k',
    'mixer-imagenet1k': 'gs://mixer_models/imagenet1k',
}
DEFAULT_PRETRAINED_DIR = PUBLISHED_DIRS['imagenet21k']
# A bare published name ('ViT-B_16') is looked up here: these files carry real ImageNet-1k heads
# (the plain imagenet21k files have all-zero heads).
DEFAULT_NAMED_COLLECTION = 'imagenet21k+imagenet2012'
# The published models' input scale, x / 127.5 - 1, as a per-channel mean/std of [0, 1] pixels.
OFFICIAL_MEAN = OFFICIAL_STD = (0.5, 0.5, 0.5)


# Each family's record (`families.FAMILIES`) holds its extra fields; these names stay for callers.
VIT_EXTRAS = families.VIT_EXTRAS
RESNET_EXTRAS = families.RESNET_EXTRAS
SWIN_EXTRAS = families.SWIN_EXTRAS
# The family records by name (iterating it gives the names).
FAMILIES = families.FAMILIES


def family_of(model_config: Any) -> str:
  """The model family a model config declares in its `family` field: one of `FAMILIES`.

  Every preset, experiment config and checkpoint description declares it; code that branches
  on the family calls this, never tests which keys a config has.

  Raises:
    ValueError: a config without a (known) `family`: one line saying what to add.
  """
  family = model_config.get('family')
  name = model_config.get('model_name') or 'the model config'
  if family not in FAMILIES:
    raise ValueError(f'{name} declares family={family!r}; set its `family` field to one of '
                     f'{", ".join(FAMILIES)} (presets.vit/.../small_vit set it).')
  # The model builds a ResNet root iff `resnet` is set; the geometry, FLOPs and file readers
  # go by the family. One truth: the two must agree.
  has_root = model_config.get('resnet') is not None
  record = FAMILIES[family]
  if record.resnet_root != has_root:
    # The family of the same module that agrees with the config (ViT <-> hybrid).
    fits = [f for f, r in FAMILIES.items()
            if r.module == record.module and r.resnet_root == has_root]
    what = f'sets resnet={dict(model_config["resnet"].items())} (a ResNet root)' if has_root else (
        'has no ResNet root (resnet=None)')
    fix = ' or '.join([f'family={f!r}' for f in fits] + ['resnet=None'] * has_root)
    raise ValueError(f'{name} declares family={family!r} but {what}: set {fix or "resnet"} so '
                     'the model and its token geometry agree.')
  return family


def record_of(model_config: Any) -> families.Family:
  """The record of the family a model config declares (`family_of`): what generic code asks
  ("does it have a ResNet root?", "does timm's ViT hold it?") instead of comparing names."""
  return FAMILIES[family_of(model_config)]


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


def _mixer(name: str, patch: int, hidden: int, blocks: int, tokens_mlp: int,
           channels_mlp: int) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      model_name=name, family='mixer',
      patches=ml_collections.ConfigDict({'size': (patch, patch)}), hidden_dim=hidden,
      num_blocks=blocks, tokens_mlp_dim=tokens_mlp, channels_mlp_dim=channels_mlp))


def _resnet(name: str, stage_sizes: Sequence[int], width_factor: float, *, root_kernel: int = 7,
            root_stride: int = 2, root_pool: bool = True) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      model_name=name, family='resnet', stage_sizes=tuple(stage_sizes),
      width_factor=float(width_factor), root_kernel=root_kernel, root_stride=root_stride,
      root_pool=root_pool))


def _swin(name: str, patch: int, embed_dim: int, depths: Sequence[int], heads: Sequence[int],
          window: int) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      model_name=name, family='swin',
      patches=ml_collections.ConfigDict({'size': (patch, patch)}), embed_dim=embed_dim,
      depths=tuple(depths), num_heads=tuple(heads), window_size=window, mlp_ratio=4.))


def _register(config: ml_collections.ConfigDict) -> None:
  name = config.model_name
  MODEL_CONFIGS[name] = config.lock()
  if record_of(config).augreg and name not in _NO_AUGREG:
    AUGREG_CONFIGS[name.replace('ViT-', '').replace('+', '_')] = config


# Widths (hidden, mlp, heads, layers) of the paper's Table 1 plus DeiT's Ti and S.
_TI, _S, _B = (192, 768, 3, 12), (384, 1536, 6, 12), (768, 3072, 12, 12)
_L, _H = (1024, 4096, 16, 24), (1280, 5120, 16, 32)

for _config in (
    vit('testing', 16, 10, 10, 2, 1, dropout=0.1),
    vit('testing-unpooled', 16, 10, 10, 2, 1, dropout=0.1, classifier='unpooled'),
    vit('ViT-Ti_16', 16, *_TI),
    vit('ViT-S_16', 16, *_S),
    vit('ViT-B_16', 16, *_B),
    vit('ViT-L_16', 16, *_L, dropout=0.1),
    vit('ViT-H_14', 14, *_H, dropout=0.1),
    vit('ViT-B_8', 8, *_B),
    vit('ViT-S_32', 32, *_S),
    vit('ViT-B_32', 32, *_B),
    vit('ViT-L_32', 32, *_L),
    vit('ViT-S_16-gap-norep', 16, *_S, classifier='gap'),
    vit('ViT-B_16-gap-norep', 16, *_B, classifier='gap'),
    vit('ViT-S_32-gap-norep', 32, *_S, classifier='gap'),
    vit('ViT-B_32-gap-norep', 32, *_B, classifier='gap'),
    # Root only: the 7x7/2 conv and 3x3/2 max-pool downscale 4x before the 8x8 patches.
    vit('R+ViT-Ti_16', 8, *_TI, resnet=((), 1)),
    # (3, 4, 9) units: 4x root × 2 × 2 → 16x downscaling, 1x1 "patches" → effective /16.
    vit('R50+ViT-B_16', 1, *_B, dropout=0.1, resnet=((3, 4, 9), 1)),
    # Four stages: 4x root × 2 × 2 × 2 → 32x downscaling → effective /32.
    vit('R26+ViT-S_32', 1, *_S, resnet=((2, 2, 2, 2), 1)),
    vit('R26+ViT-B_32', 1, *_B, resnet=((2, 2, 2, 2), 1)),
    vit('R50+ViT-L_32', 1, *_L, dropout=0.1, resnet=((3, 4, 6, 3), 1)),
    _mixer('Mixer-B_16', 16, 768, 12, 384, 3072),
    _mixer('Mixer-B_32', 32, 768, 12, 384, 3072),
    _mixer('Mixer-L_16', 16, 1024, 24, 512, 4096),
    # BiT-R50x1's stages and widths: 4x root (7x7/2 conv, 3x3/2 pool) × 2 × 2 × 2 → 32x.
    _resnet('ResNet-50', (3, 4, 6, 3), 1),
    # The CIFAR ResNet's root (3x3/1 conv, no pool) for 32px: 32 → 32, 16, 8, 4 over the stages.
    _resnet('ResNet-50_32px', (3, 4, 6, 3), 1, root_kernel=3, root_stride=1, root_pool=False),
    # Fashion-MNIST: 3x3/1 conv + 3x3/2 pool, then 14, 7, 4; widths 32/64/128 (GroupNorm needs
    # 32 channels). 0.50M params and 37 MFLOPs at 28px (XLA's count) against ViT-FMNIST_7's
    # 0.55M and 19 MFLOPs (configs/fashion_mnist_quickstart.py).
    _resnet('ResNet-11_28px', (1, 1, 1), 0.5, root_kernel=3, root_stride=1),
    # Swin (Liu et al. 2021, timm's swin_*_patch4_window{7_224,12_384}): name_patch_window.
    # The window divides the last stage exactly at the published resolution (224/32 = 7,
    # 384/32 = 12), which `finetune_resolution` returns.
    _swin('Swin-T_4_7', 4, 96, (2, 2, 6, 2), (3, 6, 12, 24), 7),
    _swin('Swin-S_4_7', 4, 96, (2, 2, 18, 2), (3, 6, 12, 24), 7),
    _swin('Swin-B_4_7', 4, 128, (2, 2, 18, 2), (4, 8, 16, 32), 7),
    _swin('Swin-B_4_12', 4, 128, (2, 2, 18, 2), (4, 8, 16, 32), 12),
    _swin('Swin-L_4_7', 4, 192, (2, 2, 18, 2), (6, 12, 24, 48), 7),
    _swin('Swin-L_4_12', 4, 192, (2, 2, 18, 2), (6, 12, 24, 48), 12),
    # Tests: 32px → an 8x8 grid of 2x2 windows of 4 (W-MSA + SW-MSA), then 4x4 (one window).
    _swin('Swin-testing', 4, 16, (2, 2), (2, 4), 4),
    # Fashion-MNIST at 28px: 2x2 patches → 14x14 (2x2 windows of 7, shifted in every other
    # block), 7x7 (one window), 4x4; widths 32/64/128, about the study ViT's 0.55M parameters.
    _swin('Swin-FMNIST_2_7', 2, 32, (2, 2, 2), (2, 4, 8), 7),
):
  _register(_config)


def get_config(name: str) -> ml_collections.ConfigDict:
  """Returns an unlocked copy of preset `name` (official or AugReg spelling)."""
  config = MODEL_CONFIGS.get(name) or AUGREG_CONFIGS.get(name)
  if config is None:
    raise ValueError(f'Unknown model {name!r}; known models: {", ".join(MODEL_CONFIGS)}.')
  return ml_collections.ConfigDict(config.to_dict())


def token_grid(model_config: Any, image_size: Sequence[int]) -> Tuple[int, int]:
  """The (rows, cols) grid of patch tokens for an image of `image_size` (height, width).

  For a plain ResNet or a Swin: the grid of its last feature map.
  """
  return tuple(record_of(model_config).token_grid(model_config, image_size))


def token_stride(model_config: Any) -> int:
  """Input pixels per token (or per cell of a ResNet's last feature map) along each axis."""
  return record_of(model_config).token_stride(model_config)


def finetune_resolution(model_config: Any, target: int = 384) -> int:
  """The official fine-tuning resolution (384px) rounded up to whole tokens (392 for /14); a
  Swin's published resolution (its last stage one window); any size for a ResNet."""
  return record_of(model_config).finetune_resolution(model_config, target)


def square_side(num_tokens: int) -> Optional[int]:
  """The side of a square grid of `num_tokens` tokens, or None when it is not a square."""
  side = math.isqrt(num_tokens) if num_tokens >= 0 else -1
  return side if side * side == num_tokens else None


def num_prefix_tokens(model_config: Any) -> int:
  """Tokens before the patch grid: the class token of 'token*' classifiers, the distillation
  token and the register tokens (0 for Mixers, ResNets and Swins)."""
  if not record_of(model_config).has_prefix_tokens:
    return 0
  return prefix_token_count(model_config['classifier'], bool(model_config.get('distilled')),
                            int(model_config.get('num_registers') or 0))


# Classifiers that put a class token before the patch grid.
CLASS_TOKEN_CLASSIFIERS = ('token', 'token_unpooled', 'token_gap')


def prefix_token_count(classifier: str, distilled: bool, num_registers: int) -> int:
  """The one count of a ViT's prefix tokens: class token, distillation token, registers
  (`num_prefix_tokens` for a config, `VisionTransformer.num_prefix_tokens` for a module)."""
  return int(classifier in CLASS_TOKEN_CLASSIFIERS) + int(distilled) + num_registers


def posemb_prefix_tokens(model_config: Any) -> int:
  """Rows of the position table before the grid: the prefix tokens, none with no_embed_class."""
  if model_config.get('no_embed_class'):
    return 0
  return num_prefix_tokens(model_config)
