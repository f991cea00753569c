"""What was published, as data (no jax import): model presets (each family's, from its folder's
`presets.py`), checkpoint folders, input scale.

`MODEL_CONFIGS[name]` is a locked ConfigDict with exactly the official fields, so
`VisionTransformer(num_classes=N, **MODEL_CONFIGS['ViT-B_16'])` works as in the official repo.
Experiment configs and the checkpoint API read these without importing jax or flax; so do the
token-grid facts of a model config (`token_grid`, `num_prefix_tokens`, `square_side`).
"""

import math
from typing import Any, Dict, Optional, Sequence, Tuple

import ml_collections

from vit_jax import families
from vit_jax.families.vit.presets import vit  # noqa: F401  # `presets.vit`, as before.

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
# Every family's published weights by name ('imagenet21k/ViT-B_16'), as its record declares
# them (`families.record.Weights`: source, size, head, data, mean/std); checkpoints/README.md is
# their catalogue.
PUBLISHED_WEIGHTS = {w.name: w for record in families.FAMILIES.values() for w in record.weights}
# A bare published name ('ViT-B_16') is looked up here: these files carry real ImageNet-1k heads
# (the plain imagenet21k files have all-zero heads).
DEFAULT_NAMED_COLLECTION = 'imagenet21k+imagenet2012'
# The published models' input scale, x / 127.5 - 1, as a per-channel mean/std of [0, 1] pixels.
OFFICIAL_MEAN = OFFICIAL_STD = (0.5, 0.5, 0.5)


# Each family's record (`families.FAMILIES`) holds its extra fields; these names stay for callers.
VIT_EXTRAS = families.VIT_EXTRAS
RESNET_EXTRAS = families.RESNET_EXTRAS
SWIN_EXTRAS = families.SWIN_EXTRAS
EVA_EXTRAS = families.EVA_EXTRAS
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


def _register(config: ml_collections.ConfigDict) -> None:
  name = config.model_name
  MODEL_CONFIGS[name] = config.lock()
  if record_of(config).augreg and name not in _NO_AUGREG:
    AUGREG_CONFIGS[name.replace('ViT-', '').replace('+', '_')] = config


# Each family's presets, from its folder (`families/<name>/presets.py`), in registry order.
for _record in FAMILIES.values():
  for _config in _record.presets:
    _register(_config.copy_and_resolve_references())


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
CLASS_TOKEN_CLASSIFIERS = ('token', 'token_unpooled', 'token_gap', 'token_map')


def prefix_token_count(classifier: str, distilled: bool, num_registers: int) -> int:
  """The one count of a ViT's prefix tokens: class token, distillation token, registers
  (`num_prefix_tokens` for a config, `VisionTransformer.num_prefix_tokens` for a module)."""
  return int(classifier in CLASS_TOKEN_CLASSIFIERS) + int(distilled) + num_registers


def posemb_prefix_tokens(model_config: Any) -> int:
  """Rows of the position table before the grid: the prefix tokens, none with no_embed_class."""
  if model_config.get('no_embed_class'):
    return 0
  return num_prefix_tokens(model_config)
