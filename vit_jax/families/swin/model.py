"""Swin Transformer (Liu et al. 2021): shifted-window attention over a 4-stage hierarchy.

The official design as timm 1.0's `swin_transformer.py` builds it, so timm's weights run here
with timm's logits (`timm.py` beside this file converts them): a 4x4 patch embedding + LayerNorm;
stages at H/4, H/8, H/16, H/32, each but the first opening with patch merging (2x2 neighbours
→ 4C → LayerNorm → Linear to 2C without bias); blocks alternating W-MSA and SW-MSA (cyclic
shift by half a window, with an attention mask keeping the wrapped regions apart); a learned
(2M-1)² relative position bias per head; stochastic depth; final LayerNorm, global average
pooling and a linear head. LayerNorm epsilon 1e-5 and the exact (erf) GELU are PyTorch's, as in
the published weights.
"""

from typing import Any, Optional, Sequence, Tuple

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

Array = jnp.ndarray
Dtype = Any

LN_EPS = 1e-5  # PyTorch's nn.LayerNorm default, which the published Swin weights were trained with.
MASK_VALUE = -100.  # What the official code adds to logits across shifted-window regions.
_dense_init = nn.initializers.truncated_normal(stddev=.02)  # timm/official init of Linear layers.


def relative_position_index(window: Tuple[int, int]) -> np.ndarray:
  """(N, N) row of the (2Mh-1)(2Mw-1) bias table for each query/key pair of a window (N=Mh*Mw).

  Offsets (dy, dx) in [-(M-1), M-1] are shifted to start at 0 and flattened row-major, as the
  official `relative_position_index` buffer.
  """
  wh, ww = window
  coords = np.stack(np.meshgrid(np.arange(wh), np.arange(ww), indexing='ij')).reshape(2, -1)
  rel = coords[:, :, None] - coords[:, None, :]  # (2, N, N): query minus key.
  return (rel[0] + wh - 1) * (2 * ww - 1) + (rel[1] + ww - 1)


def window_and_shift(resolution: Sequence[int], window: int,
                     shift: int) -> Tuple[Tuple[int, int], Tuple[int, int]]:
  """Per-axis window and shift at a feature resolution (timm's rule).

  An axis no longer than the window is one window of exactly its length, and is not shifted
  (a cyclic shift of a single window changes nothing but the mask).
  """
  size = tuple(min(r, window) for r in resolution)
  return size, tuple(0 if r <= w else shift for r, w in zip(resolution, size))


def window_partition(x: Array, window: Tuple[int, int]) -> Array:
  """(B, H, W, C) → (B * nW, Mh * Mw, C), windows in row-major order per image."""
  b, h, w, c = x.shape
  x = x.reshape(b, h // window[0], window[0], w // window[1], window[1], c)
  return x.transpose(0, 1, 3, 2, 4, 5).reshape(-1, window[0] * window[1], c)


def window_reverse(windows: Array, window: Tuple[int, int], h: int, w: int) -> Array:
  """Inverse of `window_partition` for an (H, W) grid."""
  c = windows.shape[-1]
  x = windows.reshape(-1, h // window[0], w // window[1], window[0], window[1], c)
  return x.transpose(0, 1, 3, 2, 4, 5).reshape(-1, h, w, c)


def shifted_window_mask(padded: Tuple[int, int], window: Tuple[int, int],
                        shift: Tuple[int, int]) -> Optional[np.ndarray]:
  """(nW, N, N) additive mask of SW-MSA (0 within a region, -100 across), None without shift.

  After the cyclic shift, the last window row/column holds tokens from up to 3 regions per
  axis of the original image (the bulk, the strip that was shifted, the wrapped strip); tokens
  attend only to tokens of their own region. Labels are assigned on the padded grid as in the
  official code.
  """
  if not any(shift):
    return None
  labels = np.zeros(padded, np.float32)
  count = 0
  for hs in (slice(0, -window[0]), slice(-window[0], -shift[0] or None),
             slice(-shift[0] or None, None)):
    for ws in (slice(0, -window[1]), slice(-window[1], -shift[1] or None),
               slice(-shift[1] or None, None)):
      labels[hs, ws] = count
      count += 1
  windows = np.asarray(window_partition(labels[None, :, :, None], window))[..., 0]
  return np.where(windows[:, None, :] != windows[:, :, None], MASK_VALUE, 0.).astype(np.float32)


class WindowAttention(nn.Module):
  """Multi-head self-attention inside windows, plus the relative position bias (and mask).

  Params: `query`/`key`/`value` (C, heads, C/heads) kernels and (heads, C/heads) biases, `out`
  (heads, C/heads, C), and `relative_position_bias_table` ((2Mh-1)(2Mw-1), heads).
  """

  num_heads: int
  window: Tuple[int, int]
  dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x: Array, mask: Optional[np.ndarray]) -> Array:
    _, n, c = x.shape
    head_dim = c // self.num_heads
    dense = lambda name: nn.DenseGeneral(  # noqa: E731
        (self.num_heads, head_dim), dtype=self.dtype, kernel_init=_dense_init, name=name)
    q, k, v = dense('query')(x), dense('key')(x), dense('value')(x)
    table = self.param('relative_position_bias_table', _dense_init,
                       ((2 * self.window[0] - 1) * (2 * self.window[1] - 1), self.num_heads))
    bias = table[relative_position_index(self.window).reshape(-1)].reshape(n, n, -1)
    logits = jnp.einsum('bqhd,bkhd->bhqk', q * head_dim**-.5, k) + bias.transpose(2, 0, 1)
    if mask is not None:  # Windows of one image come together: (B*nW, ...) → (B, nW, ...).
      logits = logits.reshape(-1, mask.shape[0], self.num_heads, n, n) + mask[None, :, None]
      logits = logits.reshape(-1, self.num_heads, n, n)
    weights = nn.softmax(logits.astype(jnp.float32), axis=-1).astype(self.dtype)
    out = jnp.einsum('bhqk,bkhd->bqhd', weights, v)
    return nn.DenseGeneral(c, axis=(-2, -1), dtype=self.dtype, kernel_init=_dense_init,
                           name='out')(out)


class SwinBlock(nn.Module):
  """x + DropPath(W-MSA or SW-MSA(LN(x))), then x + DropPath(MLP(LN(x))), on (B, H, W, C)."""

  num_heads: int
  window_size: int
  shift: bool
  mlp_ratio: float = 4.
  drop_path_rate: float = 0.
  dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x: Array, *, train: bool) -> Array:
    drop_path = nn.Dropout(rate=self.drop_path_rate, broadcast_dims=(1, 2, 3))
    y = nn.LayerNorm(epsilon=LN_EPS, dtype=self.dtype, name='norm1')(x)
    y = self._windowed_attention(y)
    x = x + drop_path(y, deterministic=not train)
    y = nn.LayerNorm(epsilon=LN_EPS, dtype=self.dtype, name='norm2')(x)
    y = nn.Dense(int(x.shape[-1] * self.mlp_ratio), dtype=self.dtype, kernel_init=_dense_init,
                 name='fc1')(y)
    y = nn.gelu(y, approximate=False)
    y = nn.Dense(x.shape[-1], dtype=self.dtype, kernel_init=_dense_init, name='fc2')(y)
    return x + drop_path(y, deterministic=not train)

  def _windowed_attention(self, x: Array) -> Array:
    """Cyclic shift, pad to whole windows, attend per window, undo both."""
    _, h, w, _ = x.shape
    window, shift = window_and_shift((h, w), self.window_size,
                                     self.window_size // 2 if self.shift else 0)
    if any(shift):
      x = jnp.roll(x, (-shift[0], -shift[1]), axis=(1, 2))
    pad = (-h % window[0], -w % window[1])
    x = jnp.pad(x, ((0, 0), (0, pad[0]), (0, pad[1]), (0, 0)))
    padded = (h + pad[0], w + pad[1])
    windows = window_partition(x, window)
    windows = WindowAttention(self.num_heads, window, dtype=self.dtype, name='attn')(
        windows, shifted_window_mask(padded, window, shift))
    x = window_reverse(windows, window, *padded)[:, :h, :w]
    return jnp.roll(x, shift, axis=(1, 2)) if any(shift) else x


class PatchMerging(nn.Module):
  """2x2 neighbours → 4C (timm's order: (0,0), (1,0), (0,1), (1,1)) → LayerNorm → 2C, no bias."""

  features: int
  dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x: Array) -> Array:
    b, h, w, c = x.shape
    x = jnp.pad(x, ((0, 0), (0, h % 2), (0, w % 2), (0, 0)))  # Odd sides: zero row/column.
    h, w = h + h % 2, w + w % 2
    # (B, H/2, dy, W/2, dx, C) → (B, H/2, W/2, dx, dy, C): dy runs fastest after C.
    x = x.reshape(b, h // 2, 2, w // 2, 2, c).transpose(0, 1, 3, 4, 2, 5)
    x = x.reshape(b, h // 2, w // 2, 4 * c)
    x = nn.LayerNorm(epsilon=LN_EPS, dtype=self.dtype, name='norm')(x)
    return nn.Dense(self.features, use_bias=False, dtype=self.dtype, kernel_init=_dense_init,
                    name='reduction')(x)


class SwinTransformer(nn.Module):
  """Swin Transformer classifier on NHWC images.

  Attributes:
    num_classes: outputs of the zero-initialised `head`; 0 or None for none (pooled features).
    patches: {'size': (p, p)} of the patch embedding (4 for the published models).
    embed_dim: width of the first stage; stage i has embed_dim * 2**i channels.
    depths: blocks per stage; even blocks use W-MSA, odd ones SW-MSA.
    num_heads: attention heads per stage.
    window_size: window side M (7 for 224px, 12 for 384px); clamped per axis to smaller maps.
    mlp_ratio: MLP width over the block width.
    stochastic_depth: drop-path rate of the last block, linear from 0 over all blocks.
    dtype: compute dtype (params stay float32).
    model_name: the preset name (not used by the model).
  """

  num_classes: Optional[int]
  patches: Any
  embed_dim: int
  depths: Sequence[int]
  num_heads: Sequence[int]
  window_size: int
  mlp_ratio: float = 4.
  stochastic_depth: float = 0.
  dtype: Dtype = jnp.float32
  model_name: Optional[str] = None
  family: str = 'swin'  # What `presets.family_of` reads (not used by the model).

  @nn.compact
  def __call__(self, inputs: Array, *, train: bool) -> Array:
    x = self.features(inputs, train=train)
    x = jnp.mean(x.astype(jnp.float32), axis=(1, 2))
    if self.num_classes:
      x = nn.Dense(self.num_classes, kernel_init=nn.initializers.zeros, name='head')(x)
    return x

  def features(self, inputs: Array, *, train: bool) -> Array:
    """The normalised last-stage feature map (B, H/32, W/32, C) for 4x4 patches."""
    patch = tuple(self.patches['size'])
    x = nn.Conv(self.embed_dim, patch, strides=patch, padding='VALID', dtype=self.dtype,
                name='patch_embed')(inputs.astype(self.dtype))
    x = nn.LayerNorm(epsilon=LN_EPS, dtype=self.dtype, name='patch_embed_norm')(x)
    total, index = sum(self.depths), 0
    for stage, (depth, heads) in enumerate(zip(self.depths, self.num_heads)):
      if stage:
        x = PatchMerging(self.embed_dim * 2**stage, dtype=self.dtype,
                         name=f'layers_{stage}_downsample')(x)
      for block in range(depth):
        rate = self.stochastic_depth * index / max(total - 1, 1)
        x = SwinBlock(heads, self.window_size, shift=block % 2 == 1, mlp_ratio=self.mlp_ratio,
                      drop_path_rate=rate, dtype=self.dtype,
                      name=f'layers_{stage}_blocks_{block}')(x, train=train)
        index += 1
    return nn.LayerNorm(epsilon=LN_EPS, dtype=self.dtype, name='norm')(x)
