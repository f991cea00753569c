"""A checkpoint into a ready model: the file's architecture, its params fitted, its input.

`load_model` reads a published `.npz`, run directory, published name or timm-format source
into the model its shapes describe (`architecture.architecture`; a run's metadata.json, a
`<name>.json` or `--model` add what shapes cannot say). The tools (predict, analyze, features,
export_timm) and training's distillation teacher load through it.
"""

import dataclasses
import os
from typing import Any, Dict, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from vit_jax import checkpoint
from vit_jax import config_lib
from vit_jax import models
from vit_jax import presets
from vit_jax.checkpoints import architecture
from vit_jax.checkpoints import metadata as metadata_lib
from vit_jax.checkpoints import store
from vit_jax.checkpoints import surgery
from vit_jax.checkpoints import swin_timm
from vit_jax.checkpoints import timm_files
from vit_jax.checkpoints import timm_format
from vit_jax.checkpoints.architecture import Architecture
from vit_jax.checkpoints.npz_format import CheckpointError, Params


def load_architecture(path: str, cache_dir: Optional[str] = None
                      ) -> Tuple[Params, Architecture]:
  """(Linen params, Architecture) of a checkpoint: an npz's from its shapes (`architecture`),
  a timm file's from its shapes and config.json (with its input size, mean and std)."""
  if not timm_files.is_timm_source(path):
    params = checkpoint.load(path, cache_dir)
    return params, architecture.architecture(params)
  converted = timm_format.load_as_checkpoint(path)
  arch = Architecture(config=ml_collections.ConfigDict(converted.model_config),
                      num_classes=converted.num_classes, grid=None,
                      image_size=converted.image_size, assumed=converted.assumed,
                      mean=converted.mean, std=converted.std)
  return converted.params, arch


@dataclasses.dataclass(frozen=True)
class LoadedModel:
  """A checkpoint fitted to its model (its input: `image_ops.load_images(paths, image_size,
  mean, std)`).

  Attributes:
    model: the Flax module (ViT, hybrid or Mixer) with the checkpoint's classes.
    params: Linen param tree (numpy), checked against the model.
    config: the model ConfigDict (from the file's shapes, completed by run metadata/--model).
    image_size: square input side the model runs at.
    num_classes: outputs of the head (0 when the checkpoint has none).
    head_is_zero: True for pre-training files whose head was never trained (all zeros).
    source: the checkpoint path as given.
    class_names: label names from the run's metadata.json, or None.
    assumed: what neither the shapes nor metadata decided (see `architecture.Architecture`).
    mean: per-channel input mean of the [0, 1] image (a timm config.json's; official 0.5).
    std: per-channel input std (official 0.5).
  """

  model: Any
  params: Params
  config: Any
  image_size: int
  num_classes: int
  head_is_zero: bool
  source: str
  class_names: Optional[Tuple[str, ...]] = None
  assumed: Tuple[str, ...] = ()
  mean: Tuple[float, ...] = presets.OFFICIAL_MEAN
  std: Tuple[float, ...] = presets.OFFICIAL_STD



def model_config(model: str) -> ml_collections.ConfigDict:
  """The model ConfigDict for a preset name or a `.py` config file (models outside the presets).

  The file's `get_config()` returns a model ConfigDict (e.g. `config_lib.small_vit(...)`) or an
  experiment config whose `.model` (of its `finetune` stage for two-stage configs) is one; a
  `model_name` defaults to the file's stem.
  """
  if not model.endswith('.py'):
    return models.get_config(model)
  if not os.path.isfile(model):
    raise ValueError(f'Could not find model config file "{model}"; check the path.')
  try:
    config = config_lib.load_config_module(model).get_config()
  except Exception as e:  # Any error in user code becomes one line, not a traceback.
    raise ValueError(f'Could not load model config "{model}" (its get_config() failed: '
                     f'{type(e).__name__}: {e}).') from None
  if isinstance(config, dict):
    config = ml_collections.ConfigDict(config)
  stage = next((config[k] for k in ('finetune', 'pretrain') if k in config), config)
  if 'model' in stage and hasattr(stage.model, 'to_dict'):  # An experiment config (its last stage).
    config = stage.model
  config = ml_collections.ConfigDict(config.to_dict())  # Unlocked copy.
  if config.get('family') not in presets.FAMILIES:
    raise ValueError(f'"{model}": get_config() must return a model ConfigDict that declares its '
                     f'family ({", ".join(presets.FAMILIES)}), e.g. config_lib.small_vit(...), '
                     'or an experiment config with .model.')
  if not config.get('model_name'):
    config.model_name = os.path.splitext(os.path.basename(model))[0]
  return config


def _architecture(arch: Architecture, path: str, model: Optional[str],
                  metadata: Optional[Dict[str, Any]]) -> Architecture:
  """The file's architecture, completed by its run metadata and checked against `--model`."""
  if metadata and metadata.get('model'):
    arch = architecture.conform(arch, metadata['model'], store.METADATA_FILE)
  if model:
    try:
      arch = architecture.conform(arch, model_config(model), model)
    except CheckpointError as e:
      fix = (f' or pass --model={arch.model_name}' if arch.model_name in models.MODEL_CONFIGS
             else '')
      raise CheckpointError(
          f'--model does not fit {os.path.basename(path)}: {e}; drop --model (the file says '
          f'what it is){fix}.') from None
  return arch


def warn_assumed(path: str, assumed: Sequence[str]) -> None:
  """One warning line naming each value the file could not tell and how to state it.

  E.g. a bare npz of a `posemb='none'` model is read as sincos2d (the same shapes): the line
  says so, and a `<name>.json` beside the file or `--model` settles it.
  """
  if assumed:
    logging.warning(
        '%s does not say %s: assumed. To state them, put a %s beside it (the format of a run\'s '
        '%s: {"model": {...}, "image_size": N}) or pass --model=PRESET|FILE.py (and '
        '--image_size=N).', path, '; '.join(assumed), os.path.basename(
            metadata_lib.sidecar_path(path)), store.METADATA_FILE)


def load_model(checkpoint_path: str, model: Optional[str] = None,
               image_size: Optional[int] = None) -> LoadedModel:
  """Loads a published-format checkpoint into the model its shapes describe.

  Args:
    checkpoint_path: local .npz, run directory, gs:// or https:// address, a published
      name ('ViT-B_16', 'augreg/<file stem>'), or a timm-format hub folder, .safetensors
      file or hf-hub:timm/<name>; see `store.resolve_name`.
    model: optional check: a preset name or a `.py` file (see `model_config`) that must agree
      with the file; it also settles what shapes cannot (dropout, token vs token_unpooled).
    image_size: input side; None uses the run metadata's, else the checkpoint's own
      resolution (from its position embeddings, 224 when it has none). Another size resizes
      the position embeddings.

  Returns:
    A `LoadedModel`.

  Raises:
    ValueError: unknown model name, or a `--model` that contradicts the file (one line).
    CheckpointError: missing/unreadable file or one that is no ViT/hybrid/Mixer.
  """
  if model and not model.endswith('.py'):
    models.get_config(model)  # An unknown name fails before any download.
  path = store.resolve_name(checkpoint_path)
  timm_file = timm_files.is_timm_source(path)
  if not (store.is_remote(path) or timm_file) and not os.path.isfile(path):
    raise CheckpointError(
        f'Could not find checkpoint "{checkpoint_path}"; pass an .npz file, a run directory, '
        'a gs:// or https:// address, a published name such as ViT-B_16, or a timm hub '
        'folder, .safetensors file or hf-hub:timm/<name>.')
  params, arch = load_architecture(path)
  metadata = None if timm_file else metadata_lib.read_metadata(path)
  arch = _architecture(arch, path, model, metadata)
  config = arch.config
  assumed = list(arch.assumed)
  if not (image_size or (metadata or {}).get('image_size') or arch.image_size):
    assumed.append('image_size 224 (no position-embedding grid to read it from)')
  image_size = image_size or (metadata or {}).get('image_size') or arch.image_size or 224
  warn_assumed(path, assumed)
  if models.family_of(config) != 'mixer':
    params = surgery.fit_posemb(params, config, models.token_grid(config, (image_size,) * 2))
  net = models.get_model(config, num_classes=arch.num_classes)
  expected = jax.eval_shape(
      lambda: net.init(jax.random.key(0), jnp.zeros((1, image_size, image_size, 3)),
                       train=False))['params']
  if models.family_of(config) == 'swin':  # Another input size can clamp a window: resized.
    params = swin_timm.fit_relative_position_tables(params, expected)
  surgery.check_tree(params, expected, checkpoint_path)
  head_is_zero = bool(arch.num_classes) and not np.any(params['head']['kernel'])
  names = (metadata or {}).get('class_names')
  mean, std = metadata_lib.run_normalization(metadata) or (arch.mean, arch.std)
  return LoadedModel(model=net, params=params, config=config, image_size=image_size,
                     num_classes=arch.num_classes, head_is_zero=head_is_zero,
                     source=checkpoint_path, class_names=tuple(names) if names else None,
                     assumed=tuple(assumed), mean=tuple(mean), std=tuple(std))
