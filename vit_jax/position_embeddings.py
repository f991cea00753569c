"""Position embeddings of the ViT encoder: the official learned 1-D table and the variants.

`posemb` picks one (`POSEMB_KINDS`): 'learn' (official `AddPositionEmbs`), 'learn_2d' (the
paper's row + column ablation), 'sincos2d' (fixed, no parameters: MoCo v3, big_vision) or
'none'. Every learned table is a module named `posembed_input`, so the param tree is the
official one; `checkpoint.resize_posemb` fits a 1-D table to another grid.
"""

from typing import Any, Callable, Optional, Tuple

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

Array = jnp.ndarray
Dtype = Any

POSEMB_KINDS = ('learn', 'learn_2d', 'sincos2d', 'none')


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
  if posemb == 'none':
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
