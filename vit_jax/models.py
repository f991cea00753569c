"""Model presets (`vit_jax.presets`, re-exported here) and `get_model`.

`MODEL_CONFIGS[name]` is a locked ConfigDict with exactly the official fields, so
`VisionTransformer(num_classes=N, **MODEL_CONFIGS['ViT-B_16'])` works as in the official repo.
"""

from typing import Any

import jax.numpy as jnp

from vit_jax.models_mixer import MlpMixer
from vit_jax.models_resnet import ResNet
from vit_jax.models_swin import SwinTransformer
from vit_jax.models_vit import VisionTransformer
from vit_jax.presets import (AUGREG_CONFIGS, MODEL_CONFIGS, get_config, is_mixer, is_resnet,
                             is_swin, token_grid)

__all__ = ['MODEL_CONFIGS', 'AUGREG_CONFIGS', 'VisionTransformer', 'MlpMixer', 'ResNet',
           'SwinTransformer', 'get_model', 'get_config', 'is_mixer', 'is_resnet', 'is_swin',
           'token_grid']


def get_model(name_or_config: Any, **kwargs: Any):
  """Builds a model from a preset name or a model ConfigDict; kwargs add/override fields."""
  config = get_config(name_or_config) if isinstance(name_or_config, str) else name_or_config
  fields = dict(config.to_dict() if hasattr(config, 'to_dict') else config)
  fields.update(kwargs)
  for key in ('dtype', 'param_dtype'):
    if isinstance(fields.get(key), str):  # Configs spell dtypes as strings ('bfloat16').
      fields[key] = jnp.dtype(fields[key])
  cls = (MlpMixer if is_mixer(fields) else ResNet if is_resnet(fields) else
         SwinTransformer if is_swin(fields) else VisionTransformer)
  return cls(**fields)
