"""One path from a checkpoint source to a model: resolve, read and describe once, then fit.

A source (a published name, an `.npz` path or URL, a run directory, a timm hub folder,
`.safetensors` file or `hf-hub:` name) is opened once by `open_source` into a `Source`: its
arrays in this package's tree and one description (`architecture.Architecture`: family, every
architecture field, image size, mean/std, class names, and what was assumed and why). Everything
that starts from a checkpoint takes that object: fine-tuning (`fit_source`, also behind the
official `checkpoint.load_pretrained`), the distillation teacher and the tools (`load_model`).
This module sits below `checkpoint.py` (the official API) and never imports it.
"""

import dataclasses
import os
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from vit_jax import config_lib
from vit_jax import models
from vit_jax import presets
from vit_jax.weights import architecture
from vit_jax.weights import metadata as metadata_lib
from vit_jax.weights import npz_format
from vit_jax.weights import store
from vit_jax.weights import surgery
from vit_jax.weights.timm import convert as timm_format
from vit_jax.weights.architecture import Architecture
from vit_jax.weights.npz_format import CheckpointError, Params


def read_arrays(location: store.Location, cache_dir: Optional[str] = None
                ) -> Tuple[Params, Optional[Architecture]]:
  """(Linen params, a timm file's Architecture or None) of a located checkpoint.

  Reads by the format `store.locate` found: a timm file is read and converted (its description
  comes from its config.json and shapes); an npz (local, cached or downloaded into `cache_dir`)
  is only read, and described by `open_source`.
  """
  if not location.timm:
    flat = npz_format.read_npz(store.resolve(location.path, cache_dir))
    return npz_format.params_from_flat(flat), None
  converted = timm_format.load_as_checkpoint(location.path)
  arch = Architecture(config=ml_collections.ConfigDict(converted.model_config),
                      num_classes=converted.num_classes, grid=None,
                      image_size=converted.image_size, assumed=converted.assumed,
                      mean=converted.mean, std=converted.std, class_names=converted.class_names)
  return converted.params, arch


@dataclasses.dataclass(frozen=True)
class Source:
  """A checkpoint source read once (`open_source`): its arrays and what it is.

  Attributes:
    name: the source as given (a published name, path, URL, hub folder or hf-hub: name).
    path: where it resolved to (`store.locate`).
    params: the Linen param tree (numpy), not yet fitted to any model.
    description: what the file is (family and every architecture field in `config`, classes,
      trained grid and image size, mean/std, class names, `assumed`), from its shapes completed
      by its declared description (run metadata, `<name>.json`, config.json, `--model`).
    declared: the file's own description of its model (run metadata), or None.
  """

  name: str
  path: str
  params: Params
  description: Architecture
  declared: Optional[Mapping[str, Any]] = None


def _check_exists(name: str, location: store.Location) -> None:
  path = location.path
  if not (store.is_remote(path) or location.timm) and not os.path.isfile(path):
    raise CheckpointError(
        f'Could not find checkpoint "{name}"; pass an .npz file, a run directory, a gs:// or '
        'https:// address, a published name such as ViT-B_16, or a timm hub folder, '
        '.safetensors file or hf-hub:timm/<name>.')


def open_source(name: str, model: Optional[str] = None, cache_dir: Optional[str] = None,
                location: Optional[store.Location] = None) -> Source:
  """Resolves, reads and describes a checkpoint source, once.

  Args:
    name: local .npz, run directory, gs:// or https:// address, a published name
      ('ViT-B_16', 'augreg/<file stem>'), or a timm-format hub folder, .safetensors file or
      hf-hub:timm/<name>; see `store.locate`.
    model: optional check: a preset name or a `.py` file (see `model_config`) that must agree
      with the file; it also settles what shapes cannot (dropout, token vs token_unpooled).
    cache_dir: where remote files are cached (default: `store`'s).
    location: `store.locate(name)` when the caller located it already.

  Raises:
    ValueError: unknown model name, or a `--model` that contradicts the file (one line).
    CheckpointError: missing/unreadable file or one that is no ViT/hybrid/Mixer/ResNet/Swin.
  """
  if model and not model.endswith('.py'):
    models.get_config(model)  # An unknown name fails before any download.
  location = location or store.locate(name)
  path = location.path
  _check_exists(name, location)
  params, arch = read_arrays(location, cache_dir)
  metadata = None
  if arch is None:  # An npz: its shapes, completed by its description.
    arch, metadata = architecture.architecture(params), metadata_lib.read_metadata(path)
  arch = _described(arch, path, model, metadata)
  return Source(name=name, path=path, params=params, description=arch,
                declared=(metadata or {}).get('model'))


def _described(arch: Architecture, path: str, model: Optional[str],
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
  metadata = metadata or {}
  names = metadata.get('class_names')
  mean, std = metadata_lib.run_normalization(metadata) or (arch.mean, arch.std)
  return dataclasses.replace(
      arch, image_size=metadata.get('image_size') or arch.image_size,
      class_names=tuple(names) if names else arch.class_names, mean=tuple(mean), std=tuple(std))


def warn_assumed(source: Source, assumed: Sequence[str], how: str) -> None:
  """One warning line naming each value the file could not tell and how to state it.

  E.g. a bare npz of a `posemb='none'` model is read as sincos2d (the same shapes): the line
  says so, and a `<name>.json` beside the file or naming the model (`how`) settles it.
  """
  if assumed:
    logging.warning(
        '%s does not say %s: assumed. To state them, put a %s beside it (the format of a run\'s '
        '%s: {"model": {...}, "image_size": N}) or %s.', source.path, '; '.join(assumed),
        os.path.basename(metadata_lib.sidecar_path(source.path)), store.METADATA_FILE, how)


def fit_source(source: Source, init_params: Mapping[str, Any], model_config: Any, *,
               grid_shape: Optional[Sequence[int]] = None, keep_head: bool = False,
               class_names: Optional[Sequence[str]] = None) -> Params:
  """The source's arrays fitted to a model (`surgery.fit_to_model`): the one fitting step.

  Fine-tuning replaces the head (`keep_head=False`); the teacher and the tools keep it.
  A head kept for the classes `class_names` (a run's dataset's) is matched to them by name:
  its outputs put in their order, refused when the file's classes are others, and taken in
  the file's order, with one warning, when the file names none.
  Position embeddings are fitted to `grid_shape`, Swin tables to the model's window.
  """
  _warn_if_described_otherwise(source, model_config)
  order = None
  if keep_head and class_names is not None:
    trained = source.description.class_names
    if trained is None:
      logging.warning(
          'keep_head: %s declares no class names: its head\'s outputs are taken as %s in this '
          'order, unchecked. To have them matched by name, put a %s beside it with '
          '{"class_names": [...]} in the order of its outputs.', source.path,
          surgery.class_list(class_names),
          os.path.basename(metadata_lib.sidecar_path(source.path)))
    else:
      order = surgery.head_order(trained, class_names, source.name)
      if order is not None:
        logging.info('keep_head: the head of %s put in the dataset\'s class order (matched by '
                     'name).', source.path)
  return surgery.fit_to_model(source.params, init_params, model_config, source.name,
                              grid_shape=grid_shape, keep_head=keep_head, head_order=order)


def _warn_if_described_otherwise(source: Source, model_config: Any) -> None:
  """One warning when a file's description gives another posemb/classifier than the config.

  Neither has parameters of its own in every case (sincos2d vs none; token vs token_unpooled),
  so the shapes fit and fine-tuning would silently start from another model than was trained.
  """
  described = source.declared
  if not described:
    return
  reader = architecture.reader_of(presets.family_of(model_config))
  config = reader.complete(model_config)  # A preset's omitted fields: defaults.
  changed = [key for key in reader.unseen
             if key in described and described[key] != config[key]]
  if changed:
    logging.warning(
        'load_pretrained: %s was trained with another model: %s; set %s to fine-tune the model '
        'it holds.', source.path,
        '; '.join(f'{key} {described[key]!r} in the file, {config[key]!r} in the config'
                  for key in changed),
        ' and '.join(f'--config.model.{key}={described[key]!r}' for key in changed))


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
    class_names: label names from the run's metadata.json or a timm config.json, or None.
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


def load_model(checkpoint_path: str, model: Optional[str] = None,
               image_size: Optional[int] = None) -> LoadedModel:
  """Loads a checkpoint source into the model it describes (`open_source`, `model_from_source`).

  Args:
    checkpoint_path: what `open_source` takes.
    model: optional check (a preset name or `.py` file); see `open_source`.
    image_size: input side; None uses the description's (run metadata, else the checkpoint's
      position-embedding grid, 224 when it has none). Another size resizes the position
      embeddings.

  Returns:
    A `LoadedModel`.
  """
  return model_from_source(open_source(checkpoint_path, model), image_size)


def model_from_source(source: Source, image_size: Optional[int] = None) -> LoadedModel:
  """The model a source describes with its arrays fitted (`fit_source`, keeping the head)."""
  arch = source.description
  config, assumed = arch.config, list(arch.assumed)
  if not (image_size or arch.image_size):
    assumed.append('image_size 224 (no position-embedding grid to read it from)')
  image_size = image_size or arch.image_size or 224
  warn_assumed(source, assumed, 'pass --model=PRESET|FILE.py (and --image_size=N)')
  net = models.get_model(config, num_classes=arch.num_classes)
  expected = jax.eval_shape(
      lambda: net.init(jax.random.key(0), jnp.zeros((1, image_size, image_size, 3)),
                       train=False))['params']
  params = fit_source(source, expected, config, keep_head=True,
                      grid_shape=models.token_grid(config, (image_size,) * 2))
  head_is_zero = bool(arch.num_classes) and not np.any(params['head']['kernel'])
  return LoadedModel(model=net, params=params, config=config, image_size=image_size,
                     num_classes=arch.num_classes, head_is_zero=head_is_zero,
                     source=source.name, class_names=arch.class_names,
                     assumed=tuple(assumed), mean=arch.mean, std=arch.std)
