"""Masked patch prediction (ViT paper, Appendix B.1.2) as pure functions: which patches are
corrupted and how, the colour targets, and the loss.

50% of the patch embeddings are corrupted; of those 80% become a learned [mask] embedding, 10%
another patch's embedding, 10% stay (BERT's scheme). Each corrupted patch's output token
predicts its 3-bit mean colour (512 classes, the paper's choice), or its 4x4 downsized version
in 3-bit colours (16 predictions), or its pixels (L2); the paper tried all three.
"""

import dataclasses
import math
from typing import Optional, Tuple

import jax
import jax.numpy as jnp
import optax

from vit_jax import models_masked
from vit_jax.training import mae

DOWNSIZED_CELLS = 4  # The 4x4 downsized patch of target 'color_4x4'.


@dataclasses.dataclass(frozen=True)
class Settings:
  """Masked patch prediction's corruption and target (`config.mpp`; defaults in `config_lib`).

  Attributes:
    corrupt: the fraction of patch embeddings corrupted per image.
    mask: of the corrupted, the share replaced by the learned [mask] embedding.
    random: of the corrupted, the share replaced by another patch's embedding.
    target: 'mean_color', 'color_4x4' or 'pixels'.
    color_bits: bits per channel of the colour targets.
  """
  corrupt: float
  mask: float
  random: float
  target: str
  color_bits: int


def corruption_plan(rng: jax.Array, batch: int, num_patches: int, *, corrupt: float,
                    mask: float, random: float) -> Tuple[jax.Array, jax.Array]:
  """(kind, source), both (batch, patches) int32: what `models_masked.corrupt_embeddings` does.

  Exactly round(corrupt * patches) patches per image are corrupted (a uniformly random set);
  each is MASKED with probability `mask`, RANDOM with `random`, else KEPT. A RANDOM patch takes
  the embedding of `source`, another patch of the same image (uniform over the others).
  """
  k_select, k_kind, k_source = jax.random.split(rng, 3)
  count = num_corrupted(num_patches, corrupt)
  ranks = jnp.argsort(jnp.argsort(jax.random.uniform(k_select, (batch, num_patches)), axis=1),
                      axis=1)
  u = jax.random.uniform(k_kind, (batch, num_patches))
  how = jnp.where(u < mask, models_masked.MASKED,
                  jnp.where(u < mask + random, models_masked.RANDOM, models_masked.KEPT))
  kind = jnp.where(ranks < count, how, models_masked.UNTOUCHED).astype(jnp.int32)
  offset = jax.random.randint(k_source, (batch, num_patches), 1, max(num_patches, 2))
  source = (jnp.arange(num_patches)[None] + offset) % num_patches
  return kind, source.astype(jnp.int32)


def num_corrupted(num_patches: int, corrupt: float) -> int:
  """Patches corrupted per image: round(corrupt * patches) (half to even, as Python's)."""
  return int(round(corrupt * num_patches))


def corruption_problem(num_patches: int, *, corrupt: float, mask: float, random: float,
                       where: str = '') -> Optional[str]:
  """One line on why these shares cannot train on `num_patches` patches (`where`: how they
  come about, e.g. ' (2x2 at pp.crop=32, patch 16)'), or None."""
  if not 0. < corrupt <= 1.:
    return f'mpp.corrupt={corrupt} must be in (0, 1] (the paper: 0.5).'
  if mask < 0. or random < 0. or mask + random > 1.:
    return (f'mpp.mask + mpp.random = {mask + random:g} must be at most 1, each >= 0 (the '
            'rest of the corrupted patches is kept; the paper: 0.8 and 0.1).')
  if not num_corrupted(num_patches, corrupt):
    least = math.ceil(round(50 / num_patches, 6) + 1e-6) / 100  # round() keeps x.5 to even.
    return (f'mpp.corrupt={corrupt} corrupts no patch of the {num_patches}{where}: the loss '
            f'would be empty; set --config.mpp.corrupt={least:g} or higher.')
  return None


def num_outputs(target: str, bits: int, patch: int) -> int:
  """Outputs per patch of `models_masked.MaskedPatchPredictor` for `target`."""
  colours = 2 ** (3 * bits)
  return {'mean_color': colours, 'color_4x4': DOWNSIZED_CELLS ** 2 * colours,
          'pixels': patch * patch * 3}[target]


def colour_classes(rgb: jax.Array, bits: int) -> jax.Array:
  """(..., 3) colours in [0, 1] → (...) class r * 4^bits + g * 2^bits + b of `bits` per channel."""
  levels = 2 ** bits
  q = jnp.clip(jnp.floor(rgb * levels), 0, levels - 1).astype(jnp.int32)
  return (q[..., 0] * levels + q[..., 1]) * levels + q[..., 2]


def colour_targets(images01: jax.Array, patch: int, target: str, bits: int) -> jax.Array:
  """Class targets of images in [0, 1]: (batch, patches) for 'mean_color', (batch, patches, 16)
  for 'color_4x4' (each cell the mean of a (patch/4)^2 block)."""
  patches = mae.patchify(images01, patch).reshape(images01.shape[0], -1, patch, patch, 3)
  if target == 'mean_color':
    return colour_classes(patches.mean(axis=(2, 3)), bits)
  cell = patch // DOWNSIZED_CELLS
  n, num = patches.shape[:2]
  cells = patches.reshape(n, num, DOWNSIZED_CELLS, cell, DOWNSIZED_CELLS, cell, 3)
  return colour_classes(cells.mean(axis=(3, 5)).reshape(n, num, -1, 3), bits)


def patch_losses(outputs: jax.Array, images: jax.Array, images01: jax.Array, *, patch: int,
                 target: str, bits: int) -> Tuple[jax.Array, Optional[jax.Array]]:
  """(loss, correct) per patch, (batch, patches): cross-entropy and the fraction of right
  classes for the colour targets (mean over the 16 cells of 'color_4x4'); for 'pixels' the mean
  squared error to the input pixels and None."""
  if target == 'pixels':
    return jnp.mean(jnp.square(outputs - mae.patchify(images, patch)), axis=-1), None
  labels = colour_targets(images01, patch, target, bits)
  logits = outputs.reshape(*labels.shape, -1)
  loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
  correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
  if target == 'color_4x4':
    loss, correct = loss.mean(axis=-1), correct.mean(axis=-1)
  return loss, correct
