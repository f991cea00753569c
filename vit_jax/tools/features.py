"""Features of a trained ViT for inspection: images in, embeddings/tokens/attention out.

`load_model` reads a published `.npz`, run directory or published name into the model its
shapes describe (`checkpoint.architecture`; a run's metadata.json adds what shapes cannot say);
`extract_features` runs that same model and param tree
once with Flax's `capture_intermediates` plus the attention weights each block sows, so the
numbers are exactly those of the forward pass that makes predictions (no second model).

Images are read and preprocessed by `data/image_ops.py`, with the ops of the evaluation input
pipeline (decode to 3-channel RGB, bilinear resize to the square model size, `x / 127.5 - 1`),
so predictions on a file match eval on the same image.
"""

import dataclasses
import functools
import os
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from vit_jax import checkpoint
from vit_jax import config_lib
from vit_jax import models
from vit_jax import models_vit
from vit_jax.data import image_ops

Params = Dict[str, Any]


@flax.struct.dataclass
class Features:
  """What one forward pass computed, per image of the batch.

  Attributes:
    logits: (B, num_classes) head outputs, or None for a model without head.
    pre_logits: (B, D) the embedding fed to the head (after `pre_logits` if the model has one).
    tokens: (B, N, D) encoder output (after `encoder_norm`), class token first if any.
    blocks: one (B, N, D) output per encoder block, before `encoder_norm`.
    attention: one (B, heads, N, N) softmax attention matrix per block (rows are queries).
  """

  logits: Optional[jax.Array]
  pre_logits: jax.Array
  tokens: jax.Array
  blocks: Tuple[jax.Array, ...]
  attention: Tuple[jax.Array, ...]


def _capture_filter(module: Any, method_name: str) -> bool:
  return method_name == '__call__' and isinstance(
      module, (models_vit.Encoder, models_vit.Encoder1DBlock))


def _features(model: models_vit.VisionTransformer, params: Params,
              images: jax.Array) -> Features:
  logits, state = model.apply({'params': params}, images, train=False,
                              capture_intermediates=_capture_filter, mutable=['intermediates'])
  inter = state['intermediates']
  encoder = inter['Transformer']
  num_blocks = model.transformer['num_layers']
  blocks = [encoder[f'encoderblock_{i}'] for i in range(num_blocks)]
  return Features(
      logits=logits if model.num_classes else None,
      pre_logits=inter['pre_logits'][0],
      tokens=encoder['__call__'][0],
      blocks=tuple(b['__call__'][0] for b in blocks),
      attention=tuple(b['MultiHeadDotProductAttention_0']['attention_weights'][0]
                      for b in blocks))


def make_feature_fn(model: Any) -> Callable[[Params, jax.Array], Features]:
  """A jitted `fn(params, images) -> Features` for `model`; build it once, call it per batch."""
  if not isinstance(model, models_vit.VisionTransformer) or model.transformer is None:
    raise ValueError('Features need a Vision Transformer (ViT or hybrid); Mixer and '
                     'ResNet-only models have no attention to capture.')
  return jax.jit(functools.partial(_features, model))


def extract_features(model: Any, params: Params, images: Any) -> Features:
  """Runs `model` once on NHWC `images` in [-1, 1] and returns every captured feature.

  Args:
    model: a `VisionTransformer` (e.g. `LoadedModel.model` or `models.get_model(...)`).
    params: its Linen param tree (the same one used for predictions).
    images: (B, H, W, 3) float array in [-1, 1] (see `load_images`).

  Returns:
    `Features` with logits, pre-logits embedding, encoder tokens, each block's output and each
    block's attention weights. Compiles per call; use `make_feature_fn` for many batches.
  """
  return make_feature_fn(model)(params, jnp.asarray(images, jnp.float32))


@dataclasses.dataclass(frozen=True)
class LoadedModel:
  """A checkpoint fitted to its model.

  Attributes:
    model: the Flax module (ViT, hybrid or Mixer) with the checkpoint's classes.
    params: Linen param tree (numpy), checked against the model.
    config: the model ConfigDict (from the file's shapes, completed by run metadata/--model).
    image_size: square input side the model runs at.
    num_classes: outputs of the head (0 when the checkpoint has none).
    head_is_zero: True for pre-training files whose head was never trained (all zeros).
    source: the checkpoint path as given.
    class_names: label names from the run's metadata.json, or None.
    assumed: what neither the shapes nor metadata decided (see `checkpoint.Architecture`).
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
  mean: Tuple[float, ...] = checkpoint.timm_format.OFFICIAL_MEAN
  std: Tuple[float, ...] = checkpoint.timm_format.OFFICIAL_STD

  def load_images(self, paths: Sequence[str]) -> np.ndarray:
    """`paths` preprocessed for this model (its input size, mean and std)."""
    return image_ops.load_images(paths, self.image_size, self.mean, self.std)


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
  if 'patches' not in config and not models.is_mixer(config):
    raise ValueError(f'"{model}": get_config() must return a model ConfigDict (with patches, '
                     'hidden_size, transformer, ...) or an experiment config with .model.')
  if not config.get('model_name'):
    config.model_name = os.path.splitext(os.path.basename(model))[0]
  return config


def _architecture(arch: checkpoint.Architecture, path: str, model: Optional[str],
                  metadata: Optional[Dict[str, Any]]) -> checkpoint.Architecture:
  """The file's architecture, completed by its run metadata and checked against `--model`."""
  if metadata and metadata.get('model'):
    arch = checkpoint.conform(arch, metadata['model'], checkpoint.METADATA_FILE)
  if model:
    try:
      arch = checkpoint.conform(arch, model_config(model), model)
    except checkpoint.CheckpointError as e:
      fix = (f' or pass --model={arch.model_name}' if arch.model_name in models.MODEL_CONFIGS
             else '')
      raise checkpoint.CheckpointError(
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
            checkpoint.sidecar_path(path)), checkpoint.METADATA_FILE)


def load_model(checkpoint_path: str, model: Optional[str] = None,
               image_size: Optional[int] = None) -> LoadedModel:
  """Loads a published-format checkpoint into the model its shapes describe.

  Args:
    checkpoint_path: local .npz, run directory, gs:// or https:// address, a published
      name ('ViT-B_16', 'augreg/<file stem>'), or a timm-format hub folder, .safetensors
      file or hf-hub:timm/<name>; see `checkpoint.resolve_name`.
    model: optional check: a preset name or a `.py` file (see `model_config`) that must agree
      with the file; it also settles what shapes cannot (dropout, token vs token_unpooled).
    image_size: input side; None uses the run metadata's, else the checkpoint's own
      resolution (from its position embeddings, 224 when it has none). Another size resizes
      the position embeddings.

  Returns:
    A `LoadedModel`.

  Raises:
    ValueError: unknown model name, or a `--model` that contradicts the file (one line).
    checkpoint.CheckpointError: missing/unreadable file or one that is no ViT/hybrid/Mixer.
  """
  if model and not model.endswith('.py'):
    models.get_config(model)  # An unknown name fails before any download.
  path = checkpoint.resolve_name(checkpoint_path)
  timm_file = checkpoint.timm_format.is_timm_source(path)
  if not (checkpoint.is_remote(path) or timm_file) and not os.path.isfile(path):
    raise checkpoint.CheckpointError(
        f'Could not find checkpoint "{checkpoint_path}"; pass an .npz file, a run directory, '
        'a gs:// or https:// address, a published name such as ViT-B_16, or a timm hub '
        'folder, .safetensors file or hf-hub:timm/<name>.')
  params, arch = checkpoint.load_architecture(path)
  metadata = None if timm_file else checkpoint.read_metadata(path)
  arch = _architecture(arch, path, model, metadata)
  config = arch.config
  assumed = list(arch.assumed)
  if not (image_size or (metadata or {}).get('image_size') or arch.image_size):
    assumed.append('image_size 224 (no position-embedding grid to read it from)')
  image_size = image_size or (metadata or {}).get('image_size') or arch.image_size or 224
  warn_assumed(path, assumed)
  if not models.is_mixer(config):
    params = checkpoint.fit_posemb(params, config, models.token_grid(config, (image_size,) * 2))
  net = models.get_model(config, num_classes=arch.num_classes)
  expected = jax.eval_shape(
      lambda: net.init(jax.random.key(0), jnp.zeros((1, image_size, image_size, 3)),
                       train=False))['params']
  if models.is_swin(config):  # Another input size can clamp a stage's window: tables resized.
    params = checkpoint.swin_timm.fit_relative_position_tables(params, expected)
  checkpoint.check_tree(params, expected, checkpoint_path)
  head_is_zero = bool(arch.num_classes) and not np.any(params['head']['kernel'])
  names = (metadata or {}).get('class_names')
  mean, std = checkpoint.run_normalization(metadata) or (arch.mean, arch.std)
  return LoadedModel(model=net, params=params, config=config, image_size=image_size,
                     num_classes=arch.num_classes, head_is_zero=head_is_zero,
                     source=checkpoint_path, class_names=tuple(names) if names else None,
                     assumed=tuple(assumed), mean=tuple(mean), std=tuple(std))
