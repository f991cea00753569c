"""MAE's pieces (He et al. 2022) as pure functions: patches, the visible set, the pixel loss.

The loss is the mean squared error over the masked patches only, of each patch's pixels
normalised by its own mean and variance (`norm_pix_loss`, MAE's default) or as fed to the model.
"""

import dataclasses
import math
from typing import Optional

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class Settings:
  """The masked autoencoder's mask and decoder (`config.mae`; defaults in `config_lib`).

  Attributes:
    mask_ratio: the fraction of patches hidden from the encoder.
    decoder_width: the decoder's token width.
    decoder_depth: its blocks.
    decoder_heads: its attention heads.
    norm_pix_loss: targets are each patch's pixels normalised by their mean and variance.
  """
  mask_ratio: float
  decoder_width: int
  decoder_depth: int
  decoder_heads: int
  norm_pix_loss: bool


def patchify(images: jax.Array, patch: int) -> jax.Array:
  """(batch, H, W, C) → (batch, H/p * W/p, p * p * C): patches in row-major grid order, each
  flattened as (row, column, channel), the order of MAE's `patchify` and `decoder_pred`."""
  n, h, w, c = images.shape
  x = images.reshape(n, h // patch, patch, w // patch, patch, c)
  return x.transpose(0, 1, 3, 2, 4, 5).reshape(n, (h // patch) * (w // patch), patch * patch * c)


def num_visible(num_patches: int, mask_ratio: float) -> int:
  """Patches the encoder sees: int(N * (1 - mask_ratio)), as MAE's `len_keep`, but for the
  rounding error of 1 - mask_ratio (10 * (1 - 0.9) = 0.99999999999999978 is 1 patch, not 0)."""
  return int(num_patches * (1. - mask_ratio) + 1e-6)


def mask_problem(num_patches: int, mask_ratio: float, where: str = '') -> Optional[str]:
  """One line on why `mask_ratio` cannot train on `num_patches` patches (`where`: how they
  come about, e.g. ' (2x2 at pp.crop=32, patch 16)'), or None: no patch visible (the encoder
  would see only the prefix tokens), or none hidden (the loss would be empty)."""
  visible = num_visible(num_patches, mask_ratio)
  # The suggested ratios in whole percent, rounded towards the valid side (1 of 3 patches
  # visible: at most 0.66, not 0.666667).
  percent = round(100 / num_patches, 6)
  if not visible:
    return (f'mae.mask_ratio={mask_ratio} leaves no patch of the {num_patches}{where} visible '
            f'to the encoder; set --config.mae.mask_ratio={(100 - math.ceil(percent)) / 100:g} '
            'or lower, or a larger --config.pp.crop (more patches).')
  if visible == num_patches:
    return (f'mae.mask_ratio={mask_ratio} hides no patch of the {num_patches}{where}: the loss '
            f'would be empty; set --config.mae.mask_ratio={math.ceil(percent) / 100:g} or '
            'higher.')
  return None


def visible_patches(rng: jax.Array, batch: int, num_patches: int,
                    mask_ratio: float) -> jax.Array:
  """(batch, k) sorted indices of a uniformly random set of k visible patches per image.

  Raises:
    ValueError: `mask_problem`'s line: no patch visible, or none hidden.
  """
  problem = mask_problem(num_patches, mask_ratio)
  if problem:
    raise ValueError(problem)
  noise = jax.random.uniform(rng, (batch, num_patches))
  keep = jnp.argsort(noise, axis=1)[:, :num_visible(num_patches, mask_ratio)]
  return jnp.sort(keep, axis=1).astype(jnp.int32)


def masked_positions(keep: jax.Array, num_patches: int) -> jax.Array:
  """(batch, patches) float: 1 where a patch was hidden from the encoder, 0 where visible."""
  visible = jnp.zeros((keep.shape[0], num_patches)).at[
      jnp.arange(keep.shape[0])[:, None], keep].set(1.)
  return 1. - visible


def pixel_targets(patches: jax.Array, norm_pix_loss: bool) -> jax.Array:
  """The regression targets: each patch normalised by its mean and variance (eps 1e-6) or as is."""
  if not norm_pix_loss:
    return patches
  mean = patches.mean(axis=-1, keepdims=True)
  var = patches.var(axis=-1, keepdims=True)
  return (patches - mean) / jnp.sqrt(var + 1e-6)


def reconstruction_loss(predictions: jax.Array, images: jax.Array, keep: jax.Array, *,
                        patch: int, norm_pix_loss: bool) -> jax.Array:
  """Per-image loss: the squared error per pixel, averaged over each masked patch, then over
  the image's masked patches (every image hides the same number)."""
  targets = pixel_targets(patchify(images, patch), norm_pix_loss)
  per_patch = jnp.mean(jnp.square(predictions - targets), axis=-1)
  hidden = masked_positions(keep, per_patch.shape[1])
  return jnp.sum(per_patch * hidden, axis=1) / jnp.maximum(jnp.sum(hidden, axis=1), 1.)
