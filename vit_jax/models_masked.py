"""Masked pretraining models: a ViT encoder plus what only pretraining needs, kept apart.

Each wraps an unpooled, headless `VisionTransformer` as its submodule `encoder`, so
`params['encoder']` is exactly the supervised ViT's tree (without `head`): what
`training.export` writes as a published-format npz that fine-tunes like any other.

- `MaskedPatchPredictor`: the ViT paper's masked patch prediction (Appendix B.1.2). A learned
  [mask] embedding `mask_token` and the corruption of patch embeddings (`corrupt_embeddings`),
  then a linear `mpp_head` on every output patch token.
- `MaskedAutoencoder` (He et al. 2022): the encoder runs on the visible patches only; a light
  decoder (`decoder_embed`, `mask_token`, fixed 2-D sin-cos position embeddings,
  `decoderblock_{i}`, `decoder_norm`, `decoder_pred`) predicts every patch's pixels.

Which patches are corrupted or visible is an input (`training.mpp`, `training.mae` draw it), so
the modules are deterministic functions of their params and inputs.
"""

from typing import Optional

import flax.linen as nn
import jax.numpy as jnp

from vit_jax import models_transformer
from vit_jax.families.vit import model as models_vit
from vit_jax import position_embeddings

Array = jnp.ndarray

# What `corrupt_embeddings` does to a patch: BERT's scheme as the ViT paper applies it.
UNTOUCHED, MASKED, RANDOM, KEPT = 0, 1, 2, 3


def corrupt_embeddings(x: Array, mask_token: Array, kind: Array, source: Array) -> Array:
  """Patch embeddings `x` (batch, patches, hidden) with `kind` applied per patch.

  MASKED patches become `mask_token`, RANDOM ones the embedding of patch `source` of the same
  image (another patch: `training.mpp.corruption_plan`), KEPT and UNTOUCHED ones stay.
  """
  other = jnp.take_along_axis(x, source[..., None], axis=1)
  x = jnp.where((kind == MASKED)[..., None], mask_token.astype(x.dtype), x)
  return jnp.where((kind == RANDOM)[..., None], other, x)


def _grid_and_prefix(encoder: models_vit.VisionTransformer, images: Array):
  ph, pw = encoder.patches['size']
  return (images.shape[1] // ph, images.shape[2] // pw), encoder.num_prefix_tokens


class MaskedPatchPredictor(nn.Module):
  """ViT encoder + [mask] embedding + a linear head per patch token (masked patch prediction).

  Attributes:
    encoder: an unpooled `VisionTransformer` without head (`num_classes=0`).
    num_outputs: outputs per patch: 512 (3-bit mean colour), 16 * 512 (4x4 in 3-bit colours)
      or patch * patch * 3 (pixels, L2).
  """

  encoder: models_vit.VisionTransformer
  num_outputs: int

  @nn.compact
  def __call__(self, images: Array, *, train: bool, kind: Optional[Array] = None,
               source: Optional[Array] = None) -> Array:
    """(batch, patches, num_outputs) predictions; `kind`/`source` (batch, patches) corrupt."""
    mask_token = self.param('mask_token', nn.initializers.normal(stddev=0.02),
                            (1, 1, self.encoder.hidden_size))
    corrupt = None
    if kind is not None:
      def corrupt(x):
        return corrupt_embeddings(x, mask_token, kind, source)
    tokens = self.encoder(images, train=train, corrupt=corrupt)
    _, prefix = _grid_and_prefix(self.encoder, images)
    return nn.Dense(self.num_outputs, name='mpp_head')(tokens[:, prefix:]).astype(jnp.float32)


class MaskedAutoencoder(nn.Module):
  """ViT encoder on the visible patches + MAE's decoder predicting every patch's pixels.

  Attributes:
    encoder: an unpooled `VisionTransformer` without head (`num_classes=0`).
    decoder_width: decoder token width (MAE: 512).
    decoder_depth: decoder blocks (MAE: 8).
    decoder_heads: decoder attention heads (MAE: 16).
  """

  encoder: models_vit.VisionTransformer
  decoder_width: int
  decoder_depth: int
  decoder_heads: int

  @nn.compact
  def __call__(self, images: Array, *, train: bool, keep: Optional[Array] = None) -> Array:
    """(batch, patches, patch * patch * 3) pixels; `keep` (batch, k) = the visible patches."""
    (gh, gw), prefix = _grid_and_prefix(self.encoder, images)
    tokens = self.encoder(images, train=train, keep=keep)
    x = nn.Dense(self.decoder_width, name='decoder_embed')(tokens)
    n, width = x.shape[0], self.decoder_width
    mask_token = self.param('mask_token', nn.initializers.normal(stddev=0.02), (1, 1, width))
    grid = x[:, prefix:]
    if keep is not None:  # Mask tokens everywhere, the encoded patches back at their places.
      grid = jnp.broadcast_to(mask_token.astype(x.dtype), (n, gh * gw, width)).at[
          jnp.arange(n)[:, None], keep].set(grid)
    grid = grid + jnp.asarray(position_embeddings.posemb_sincos_2d((gh, gw), width), x.dtype)
    x = jnp.concatenate([x[:, :prefix], grid], axis=1)
    for i in range(self.decoder_depth):
      x = models_transformer.Encoder1DBlock(
          mlp_dim=4 * width, num_heads=self.decoder_heads, dropout_rate=0.,
          attention_dropout_rate=0., name=f'decoderblock_{i}')(x, not train)
    x = nn.LayerNorm(epsilon=1e-6, name='decoder_norm')(x)
    ph, pw = self.encoder.patches['size']
    return nn.Dense(ph * pw * 3, name='decoder_pred')(x[:, prefix:]).astype(jnp.float32)


# A classifier's unpooled twin: the same parameters, every token out. ('map' has a pooling head
# the encoder would not train.)
UNPOOLED = {'token': 'token_unpooled', 'token_gap': 'token_unpooled',
            'token_unpooled': 'token_unpooled', 'gap': 'unpooled', 'unpooled': 'unpooled'}
