"""MAE's pieces (He et al. 2022) as pure functions: patches, the visible set, the pixel loss.

The loss is the mean squared error over the masked patches only, of each patch's pixels
normalised by its own mean and variance (`norm_pix_loss`, MAE's default) or as fed to the model.
"""

import jax
import jax.numpy as jnp


def patchify(images: jax.Array, patch: int) -> jax.Array:
  """(batch, H, W, C) → (batch, H/p * W/p, p * p * C): patches in row-major grid order, each
  flattened as (row, column, channel), the order of MAE's `patchify` and `decoder_pred`."""
  n, h, w, c = images.shape
  x = images.reshape(n, h // patch, patch, w // patch, patch, c)
  return x.transpose(0, 1, 3, 2, 4, 5).reshape(n, (h // patch) * (w // patch), patch * patch * c)


def num_visible(num_patches: int, mask_ratio: float) -> int:
  """Patches the encoder sees: int(N * (1 - mask_ratio)), as MAE's `len_keep`."""
  return int(num_patches * (1. - mask_ratio))


def visible_patches(rng: jax.Array, batch: int, num_patches: int,
                    mask_ratio: float) -> jax.Array:
  """(batch, k) sorted indices of a uniformly random set of k visible patches per image."""
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
