"""Model presets (`vit_jax.presets`, re-exported here) and `get_model`.

`MODEL_CONFIGS[name]` is a locked ConfigDict with exactly the official fields, so
`VisionTransformer(num_classes=N, **MODEL_CONFIGS['ViT-B_16'])` works as in the official repo.
"""

from typing import Any

import jax.numpy as jnp

from vit_jax import families
from vit_jax.families.mixer.model import MlpMixer
from vit_jax.families.resnet.model import ResNet
from vit_jax.families.swin.model import SwinTransformer
from vit_jax.families.vit.model import VisionTransformer
from vit_jax.presets import AUGREG_CONFIGS, MODEL_CONFIGS, family_of, get_config, token_grid

__all__ = ['MODEL_CONFIGS', 'AUGREG_CONFIGS', 'VisionTransformer', 'MlpMixer', 'ResNet',
           'SwinTransformer', 'MODULES', 'module_of', 'get_model', 'get_config', 'family_of',
           'token_grid']


def module_of(family: str) -> Any:
  """The Flax module class a family's record (`families.FAMILIES`) names."""
  return families.resolve(families.FAMILIES[family].module)


# The Flax module of each published family (what `get_model` builds; read from the records).
MODULES = {name: module_of(name) for name in families.FAMILIES}


def get_model(name_or_config: Any, **kwargs: Any):
  """Builds a model from a preset name or a model ConfigDict; kwargs add/override fields."""
  config = get_config(name_or_config) if isinstance(name_or_config, str) else name_or_config
  fields = dict(config.to_dict() if hasattr(config, 'to_dict') else config)
  fields.update(kwargs)
  for key in ('dtype', 'param_dtype'):
    if isinstance(fields.get(key), str):  # Configs spell dtypes as strings ('bfloat16').
      fields[key] = jnp.dtype(fields[key])
  return module_of(family_of(fields))(**fields)
