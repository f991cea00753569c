"""Features of a trained ViT for inspection: images in, embeddings/tokens/attention out.

`weights.loading.load_model` reads a checkpoint into the model its shapes describe;
`extract_features` runs that same model and param tree
once with Flax's `capture_intermediates` plus the attention weights each block sows, so the
numbers are exactly those of the forward pass that makes predictions (no second model).

Images are read and preprocessed by `data/image_ops.py`, with the ops of the evaluation input
pipeline (decode to 3-channel RGB, bilinear resize to the square model size, `x / 127.5 - 1`),
so predictions on a file match eval on the same image.
"""

import functools
from typing import Any, Callable, Dict, Optional, Tuple

import flax
import jax
import jax.numpy as jnp

from vit_jax import models_transformer
from vit_jax import models_vit

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
      module, (models_transformer.Encoder, models_transformer.Encoder1DBlock))


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
    raise ValueError('Features need a Vision Transformer (ViT or hybrid): a Swin attends '
                     'within shifted windows (no token-to-token map over the image), Mixer and '
                     'ResNet models have no attention to capture.')
  return jax.jit(functools.partial(_features, model))


def extract_features(model: Any, params: Params, images: Any) -> Features:
  """Runs `model` once on NHWC `images` in [-1, 1] and returns every captured feature.

  Args:
    model: a `VisionTransformer` (e.g. `loading.LoadedModel.model` or `models.get_model`).
    params: its Linen param tree (the same one used for predictions).
    images: (B, H, W, 3) float array in [-1, 1] (see `load_images`).

  Returns:
    `Features` with logits, pre-logits embedding, encoder tokens, each block's output and each
    block's attention weights. Compiles per call; use `make_feature_fn` for many batches.
  """
  return make_feature_fn(model)(params, jnp.asarray(images, jnp.float32))
