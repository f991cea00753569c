"""Position embeddings of the ViT encoder: the official learned 1-D table and the variants.

`posemb` picks one (`POSEMB_KINDS`): 'learn' (official `AddPositionEmbs`), 'learn_2d' (the
paper's row + column ablation), 'sincos2d' (fixed, no parameters: MoCo v3, big_vision),
'relative' (the paper's Appendix D.4: no table added to the tokens; each encoder block's
attention gets a bias from learned per-offset embeddings, `RelativePositionKeys`), 'rope' and
'rope_mixed' (rotary: no table added; every block rotates its queries and keys by angles linear
in the patch's row and column, `rotate`: fixed axial frequencies, or per-head learned ones in
each block's `rope_freqs`; Heo et al. 2024, "Rotary Position Embedding for Vision
Transformer") or 'none'.
Every learned absolute table is a module named `posembed_input`, so the param tree is the
official one; `checkpoint.resize_posemb` fits a 1-D table to another grid.
"""

import functools
import math
from typing import Any, Callable, Optional, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

Array = jnp.ndarray
Dtype = Any

POSEMB_KINDS = ('learn', 'learn_2d', 'sincos2d', 'relative', 'rope', 'rope_mixed', 'none')
# The kinds that act inside attention, adding nothing to the tokens.
ROPE_KINDS = ('rope', 'rope_mixed')
IN_ATTENTION = ('relative',) + ROPE_KINDS
# RoPE's frequency bases (Heo et al. 2024 and timm's RoPE ViTs): 100 for the fixed axial
# frequencies, 10 for the magnitudes the mixed kind starts its learned frequencies from.
ROPE_AXIAL_TEMPERATURE = 100.
ROPE_MIXED_TEMPERATURE = 10.
# Rows of `rel_embedding_prefix`: prefix query → patch key, patch query → prefix key, and
# prefix → prefix (as BEiT's three extra relative-position entries).
RELATIVE_PREFIX_ROWS = 3


def posemb_sincos_2d(grid_shape: Tuple[int, int], width: int,
                     temperature: float = 10_000.) -> np.ndarray:
  """Fixed 2-D sin-cos table of shape (1, gh*gw, width): quarter of channels per sin/cos × y/x."""
  if width % 4:
    raise ValueError(f'sincos2d position embeddings need hidden_size divisible by 4, got {width}')
  gh, gw = grid_shape
  y, x = np.mgrid[:gh, :gw]
  quarter = width // 4
  omega = 1. / temperature**(np.arange(quarter) / max(quarter - 1, 1))
  y = y.reshape(-1)[:, None] * omega[None]
  x = x.reshape(-1)[:, None] * omega[None]
  table = np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1)
  return table[None].astype(np.float32)


class AddPositionEmbs(nn.Module):
  """Adds learned 1-D position embeddings `pos_embedding` of shape (1, tokens, hidden)."""

  posemb_init: Callable[..., Array] = nn.initializers.normal(stddev=0.02)  # As in BERT.
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, inputs: Array) -> Array:
    if inputs.ndim != 3:
      raise ValueError(f'AddPositionEmbs expects (batch, tokens, hidden), got {inputs.shape}')
    shape = (1, inputs.shape[1], inputs.shape[2])
    pe = self.param('pos_embedding', self.posemb_init, shape, self.param_dtype)
    return inputs + pe.astype(inputs.dtype)


class AddPositionEmbs2D(nn.Module):
  """Learned 2-D embeddings: row and column tables of hidden/2 each, concatenated per cell.

  The paper's ablation ("2-D positional embedding"); prefix tokens (the class token) get their
  own learned row `pos_embedding_prefix`.
  """

  grid_shape: Tuple[int, int]
  posemb_init: Callable[..., Array] = nn.initializers.normal(stddev=0.02)
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, inputs: Array) -> Array:
    _, n, d = inputs.shape
    gh, gw = self.grid_shape
    if d % 2:
      raise ValueError(f'learn_2d position embeddings need an even hidden_size, got {d}')
    rows = self.param('pos_embedding_row', self.posemb_init, (gh, d // 2), self.param_dtype)
    cols = self.param('pos_embedding_col', self.posemb_init, (gw, d // 2), self.param_dtype)
    grid = jnp.concatenate([jnp.broadcast_to(rows[:, None], (gh, gw, d // 2)),
                            jnp.broadcast_to(cols[None, :], (gh, gw, d // 2))], axis=-1)
    table = grid.reshape(1, gh * gw, d)
    num_prefix = n - gh * gw
    if num_prefix:
      prefix = self.param('pos_embedding_prefix', self.posemb_init, (1, num_prefix, d),
                          self.param_dtype)
      table = jnp.concatenate([prefix, table], axis=1)
    return inputs + table.astype(inputs.dtype)


def add(x: Array, posemb: str, grid_shape: Optional[Tuple[int, int]],
        param_dtype: Dtype) -> Array:
  """Adds the `posemb` kind of embedding to tokens `x` (prefix tokens first, then the grid).

  Called inside a compact `__call__` (the Encoder's), so the learned tables become its
  `posembed_input` submodule.
  """
  if posemb == 'none' or posemb in IN_ATTENTION:  # Those act in each block's attention.
    return x
  if posemb == 'learn':
    return AddPositionEmbs(param_dtype=param_dtype, name='posembed_input')(x)
  if grid_shape is None:
    raise ValueError(f'posemb={posemb!r} needs the token grid_shape')
  if posemb == 'learn_2d':
    return AddPositionEmbs2D(grid_shape=tuple(grid_shape), param_dtype=param_dtype,
                             name='posembed_input')(x)
  table = posemb_sincos_2d(grid_shape, x.shape[-1])
  num_prefix = x.shape[1] - table.shape[1]
  table = np.concatenate([np.zeros((1, num_prefix, x.shape[-1]), np.float32), table], axis=1)
  return x + jnp.asarray(table, x.dtype)


def relative_offset_index(grid_shape: Tuple[int, int], num_prefix: int) -> np.ndarray:
  """(tokens, tokens) row of each (query, key) pair in the flattened relative table.

  Grid tokens are row-major after `num_prefix` prefix tokens. A grid pair's row is its offset
  (dy, dx) = query - key, dy in [-(gh-1), gh-1] and dx in [-(gw-1), gw-1], at
  (dy + gh - 1) * (2gw - 1) + dx + gw - 1; pairs with a prefix token take the
  `RELATIVE_PREFIX_ROWS` rows after the (2gh-1)(2gw-1) offsets.
  """
  gh, gw = grid_shape
  y, x = (a.reshape(-1) for a in np.mgrid[:gh, :gw])
  dy, dx = y[:, None] - y[None], x[:, None] - x[None]
  grid_index = (dy + gh - 1) * (2 * gw - 1) + dx + gw - 1
  offsets = (2 * gh - 1) * (2 * gw - 1)
  tokens = num_prefix + gh * gw
  index = np.full((tokens, tokens), offsets + 2, np.int32)  # Prefix → prefix.
  index[:num_prefix, num_prefix:] = offsets  # A prefix query attending to the grid.
  index[num_prefix:, :num_prefix] = offsets + 1  # A grid query attending to a prefix token.
  index[num_prefix:, num_prefix:] = grid_index
  return index


class RelativePositionKeys(nn.Module):
  """The paper's relative position embeddings (Appendix D.4): one learned key per offset.

  The paper: "for every given pair (one as query, and the other as key/value in the attention
  mechanism), we have an offset p_q - p_k, where each offset is associated with an embedding.
  Then, we simply run extra attention, where we use the original query (the content of query),
  but use relative positional embeddings as keys. We then use the logits from the relative
  attention as a bias term and add it to the logits of the main attention". So the bias of a
  pair is query · embedding(offset) per head (scaled by 1/sqrt(head_dim) as the content
  logits are), not a learned scalar per offset. The paper calls its variant 1-dimensional;
  offsets here are 2-D (dy, dx) of the patch grid, which a flattened 1-D offset conflates
  (dx = gw - 1 and (dy, dx) = (1, -1) are both gw - 1 apart in the sequence).

  `rel_embedding` is (2gh - 1, 2gw - 1, heads, head_dim): a hidden-wide key per offset split
  into heads as the content keys are. With prefix tokens (the class token, which has no grid
  position), `rel_embedding_prefix` (3, heads, head_dim) holds one key for prefix → grid,
  one for grid → prefix and one for prefix → prefix pairs. Each encoder block has its own
  (the paper does not say; Shaw et al. learn one per layer), and no table is added to tokens.
  """

  grid_shape: Tuple[int, int]
  num_heads: int
  posemb_init: Callable[..., Array] = nn.initializers.normal(stddev=0.02)
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, num_tokens: int, head_dim: int,
               keep: Optional[Array] = None) -> Tuple[Array, Any]:
    """(keys (rows, heads, head_dim), index) for `relative_attention`.

    The index is (tokens, tokens) for a sequence of the prefix tokens and the whole grid; with
    `keep` (batch, k), the grid indices of the only patches after the prefix (MAE's visible
    ones), it is (batch, tokens, tokens): each kept patch at its own offsets.
    """
    gh, gw = self.grid_shape
    num_prefix = num_tokens - (gh * gw if keep is None else keep.shape[1])
    if num_prefix < 0:
      raise ValueError(f'posemb=relative: {num_tokens} tokens cannot hold a {gh}x{gw} grid')
    table = self.param('rel_embedding', self.posemb_init,
                       (2 * gh - 1, 2 * gw - 1, self.num_heads, head_dim), self.param_dtype)
    keys = table.reshape(-1, self.num_heads, head_dim)
    if num_prefix:
      prefix = self.param('rel_embedding_prefix', self.posemb_init,
                          (RELATIVE_PREFIX_ROWS, self.num_heads, head_dim), self.param_dtype)
      keys = jnp.concatenate([keys, prefix], axis=0)
    index = relative_offset_index(self.grid_shape, num_prefix)
    return keys, index if keep is None else kept_offset_index(index, keep, num_prefix)


def kept_offset_index(index: np.ndarray, keep: Array, num_prefix: int) -> Array:
  """(batch, tokens, tokens): the rows and columns of the whole sequence's `index` of the prefix
  tokens and the patches at `keep` (batch, k), in that order (`models_transformer.keep_tokens`).
  """
  prefix = jnp.broadcast_to(jnp.arange(num_prefix, dtype=keep.dtype), (keep.shape[0], num_prefix))
  tokens = jnp.concatenate([prefix, num_prefix + keep], axis=1)
  return jnp.asarray(index)[tokens[:, :, None], tokens[:, None, :]]


def relative_logits(query: Array, keys: Array, index: Any) -> Array:
  """(batch, heads, q, k) bias: query · keys[index[q, k]] / sqrt(head_dim).

  `index` is (q, k), or (batch, q, k) when each image keeps its own patches (MAE). The query
  meets every offset's key once (batch × heads × q × rows products) and the pairs gather their
  offset's logit, so no (q, k, head_dim) tensor is built.
  """
  scale = 1. / math.sqrt(query.shape[-1])
  per_row = jnp.einsum('bqhd,rhd->bhqr', query * jnp.asarray(scale, query.dtype),
                       keys.astype(query.dtype))
  index = jnp.asarray(index)
  index = index[None, None] if index.ndim == 2 else index[:, None]
  index = jnp.broadcast_to(index, per_row.shape[:3] + index.shape[-1:])
  return jnp.take_along_axis(per_row, index, axis=-1)


def relative_attention(attention_fn: Callable[..., Array], keys: Array,
                       index: Any) -> Callable[..., Array]:
  """`attention_fn` with `relative_logits` added as a bias to the content logits.

  The result reports `attention_fn`'s signature (`functools.wraps`), so Flax passes it the
  same keyword arguments; each `ops.ATTENTION_FNS` entry takes a bias.
  """

  @functools.wraps(attention_fn)
  def with_bias(query: Array, key: Array, value: Array, **kwargs) -> Array:
    bias = relative_logits(query, keys, index)
    if kwargs.get('bias') is not None:
      bias = bias + kwargs['bias']
    return attention_fn(query, key, value, **{**kwargs, 'bias': bias})

  return with_bias


def grid_coordinates(grid_shape: Tuple[int, int]) -> Tuple[np.ndarray, np.ndarray]:
  """(rows, cols) of each patch of a row-major `grid_shape`, as float32 (gh*gw,) each."""
  rows, cols = np.mgrid[:grid_shape[0], :grid_shape[1]]
  return rows.reshape(-1).astype(np.float32), cols.reshape(-1).astype(np.float32)


def check_rope_head_dim(head_dim: int, posemb: str) -> None:
  if head_dim % 4:
    raise ValueError(f'posemb={posemb!r} rotates pairs of channels along two axes: the head width '
                     f'must be a multiple of 4, not {head_dim} (hidden_size / num_heads).')


def axial_rope_angles(grid_shape: Tuple[int, int], head_dim: int,
                      temperature: float = ROPE_AXIAL_TEMPERATURE) -> np.ndarray:
  """(gh*gw, 1, head_dim // 2) rotation angles of axial RoPE, the same for every head (the
  axis of 1): the first half of a head's channel pairs turn with the patch's row, the second
  half with its column, at the frequencies temperature^(-i / (head_dim / 4)), i < head_dim / 4.
  """
  check_rope_head_dim(head_dim, 'rope')
  bands = temperature ** -(np.arange(head_dim // 4, dtype=np.float32) / (head_dim // 4))
  rows, cols = grid_coordinates(grid_shape)
  return np.concatenate([rows[:, None] * bands, cols[:, None] * bands], axis=1)[:, None]


def init_mixed_rope_freqs(rng: Any, shape: Tuple[int, int, int], dtype: Dtype = jnp.float32,
                          temperature: float = ROPE_MIXED_TEMPERATURE) -> Array:
  """Mixed RoPE's starting frequencies, (2, heads, head_dim // 2): per head, the axial
  magnitudes temperature^(-4i / head_dim) along a random direction and the one at right angles
  to it (x components first, then y), as Heo et al. 2024 and timm's `RotaryEmbeddingMixed`
  start."""
  _, heads, half = shape
  magnitude = temperature ** -(jnp.arange(0, 2 * half, 4, dtype=jnp.float32) / (2 * half))
  angle = jax.random.uniform(rng, (heads, 1), jnp.float32, 0., 2 * np.pi)
  fx = jnp.concatenate([magnitude * jnp.cos(angle), magnitude * jnp.cos(angle + np.pi / 2)], -1)
  fy = jnp.concatenate([magnitude * jnp.sin(angle), magnitude * jnp.sin(angle + np.pi / 2)], -1)
  return jnp.stack([fx, fy]).astype(dtype)


def mixed_rope_angles(freqs: Array, grid_shape: Tuple[int, int]) -> Array:
  """(gh*gw, heads, head_dim // 2) angles of mixed RoPE: column × x-frequency + row ×
  y-frequency, per head (`freqs` (2, heads, head_dim // 2), a block's `rope_freqs`)."""
  rows, cols = grid_coordinates(grid_shape)
  freqs = freqs.astype(jnp.float32)
  return cols[:, None, None] * freqs[0] + rows[:, None, None] * freqs[1]


def rope_coordinates(grid_shape: Tuple[int, int], *, xy: bool = False, offset: float = 0.,
                     reference: Optional[Tuple[int, int]] = None,
                     centered: bool = False) -> np.ndarray:
  """(gh*gw, 2) float32 coordinates of a row-major grid's patches, as timm's `_build_grid`:
  indices plus `offset`, rescaled so the grid spans `reference` (EVA's `ref_feat_shape`: a
  fine-tuned grid keeps the pretraining range), or with `centered` (DINOv3) the cell centres
  in [-1, 1] per axis. Channels are (row, col), or (col, row) with `xy`."""
  axes = []
  for side, ref in zip(grid_shape, reference or grid_shape):
    t = np.arange(side, dtype=np.float32) + np.float32(offset + (0.5 if centered else 0.))
    if centered:
      t = t / np.float32(side)
    elif reference is not None:
      t = t / np.float32(side) * np.float32(ref)
    axes.append(t)
  rows, cols = np.meshgrid(axes[0], axes[1], indexing='ij')
  coords = np.stack([rows.reshape(-1), cols.reshape(-1)], axis=-1)
  if centered:
    coords = np.float32(2.) * coords - np.float32(1.)
  return np.ascontiguousarray(coords[:, ::-1] if xy else coords)


def coordinate_rope_angles(coords: np.ndarray, head_dim: int, temperature: float,
                           centered: bool = False) -> np.ndarray:
  """(patches, 1, head_dim // 2) angles of axial RoPE at `coords` (`rope_coordinates`): the
  first channel's coordinate times the head_dim / 4 bands temperature^(-i / (head_dim / 4)),
  then the second's (timm's `RotaryEmbeddingCat`); centred coordinates turn 2π per period
  (`RotaryEmbeddingDinoV3`)."""
  bands = head_dim // 4
  exponent = np.arange(bands, dtype=np.float32) / np.float32(bands)
  if centered:
    periods = np.float32(temperature) ** exponent
    angles = np.float32(2 * np.pi) * coords[:, :, None] / periods
  else:
    angles = coords[:, :, None] * (np.float32(1.) / np.float32(temperature) ** exponent)
  return angles.reshape(coords.shape[0], 1, 2 * bands).astype(np.float32)


def sequence_angles(angles: Array, num_prefix: int, length: int,
                    keep: Optional[Array] = None) -> Array:
  """The grid's `angles` (patches, heads or 1, head_dim // 2) placed in a sequence of `length`
  tokens, (1 or batch, length, heads or 1, head_dim // 2): 0 (no rotation) for the
  `num_prefix` prefix tokens before the grid and for padding after it. With `keep` (batch, k),
  only those patches follow the prefix (MAE), each image its own."""
  angles = jnp.asarray(angles)[None] if keep is None else jnp.asarray(angles)[keep]
  after = length - num_prefix - angles.shape[1]
  return jnp.pad(angles, ((0, 0), (num_prefix, after), (0, 0), (0, 0)))


def rotate(x: Array, angles: Array, half: bool = False) -> Array:
  """Rotates each pair of channels (0, 1), (2, 3), ... of `x` (batch, tokens, heads, head_dim)
  by its angle in `angles` (batch or 1, tokens, heads or 1, head_dim // 2), in timm's
  interleaved layout (`apply_rot_embed`): out = x cos + (-x1, x0, -x3, x2, ...) sin. With
  `half` the pairs are (i, i + head_dim / 2) instead (timm's `rotate_half`, DINOv3's)."""
  cos, sin = jnp.cos(angles), jnp.sin(angles)
  if half:
    first, second = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([first * cos - second * sin, second * cos + first * sin],
                           axis=-1).astype(x.dtype)
  pairs = x.reshape(*x.shape[:-1], -1, 2)
  even, odd = pairs[..., 0], pairs[..., 1]
  rotated = jnp.stack([even * cos - odd * sin, odd * cos + even * sin], axis=-1)
  return rotated.reshape(x.shape).astype(x.dtype)


def rotary_attention(attention_fn: Callable[..., Array], angles: Array) -> Callable[..., Array]:
  """`attention_fn` on queries and keys rotated by `angles` (`sequence_angles`): each score
  q_i · k_j then depends on the positions of i and j through their offset only."""

  @functools.wraps(attention_fn)
  def with_rotation(query: Array, key: Array, value: Array, **kwargs) -> Array:
    return attention_fn(rotate(query, angles), rotate(key, angles), value, **kwargs)

  return with_rotation
