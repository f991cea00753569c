"""Checkpoint surgery: pure functions that fit a loaded param tree to a model.

New heads, dropped `pre_logits`, position embeddings resized to the model's token grid
(bilinear, as the official code), Swin relative-position tables resized as timm does, dtypes
cast, and one short error naming the first differences when the trees still do not match.
`checkpoint.load_pretrained` and `loading.load_model` are built from these.
"""

from typing import Any, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from absl import logging

from vit_jax import presets
from vit_jax.weights import architecture
from vit_jax.weights import npz_format
from vit_jax.weights.npz_format import CheckpointError, Params


def _square_grid(num_tokens: int, what: str) -> Tuple[int, int]:
  """(side, side) of `num_tokens` grid tokens; a CheckpointError naming `what` if not square."""
  side = presets.square_side(num_tokens)
  if side is None:
    raise CheckpointError(f'{what} has {num_tokens} grid tokens, which is not a square grid; '
                          'pass its grid shape explicitly.')
  return side, side


def _names(items: Sequence[str], limit: int) -> str:
  shown = ', '.join(items[:limit])
  return f'{shown}, ...' if len(items) > limit else shown


def check_tree(params: Mapping[str, Any], expected: Mapping[str, Any], source: str) -> None:
  """Raises one short CheckpointError (counts, first names, likely cause) if the trees differ."""
  got = {k: np.shape(v) for k, v in npz_format.flatten(params).items()}
  want = {k: np.shape(v) for k, v in npz_format.flatten(expected).items()}
  missing = sorted(want.keys() - got.keys())
  extra = sorted(got.keys() - want.keys())
  misshaped = [f'{k} {got[k]} vs model {want[k]}' for k in sorted(got.keys() & want.keys())
               if got[k] != want[k]]
  if not (missing or extra or misshaped):
    return
  cause = ('a checkpoint of another model or classifier' if missing or extra
           else 'another width, depth or resolution')
  where = source if len(source) <= 48 else '...' + source[-45:]
  for limit in (3, 2, 1, 0):  # As many names as fit in ~300 characters.
    parts = [f'{len(items)} {label}' + (f' ({_names(items, limit)})' if limit else '')
             for label, items in (('missing', missing), ('extra', extra),
                                  ('misshaped', misshaped)) if items]
    message = f'{where} does not fit the model: {"; ".join(parts)}; likely {cause}.'
    if len(message) <= 300:
      break
  raise CheckpointError(message)


def _params_prefix_tokens(params: Mapping[str, Any]) -> int:
  return (int('cls' in params) + int('dist' in params)
          + (np.shape(params['reg'])[1] if 'reg' in params else 0))



def resize_posemb(posemb: np.ndarray, new_grid: Sequence[int], *, num_prefix_tokens: int,
                  old_grid: Optional[Sequence[int]] = None) -> np.ndarray:
  """Bilinearly resizes a (1, prefix + gh*gw, D) position embedding to `new_grid`.

  The prefix rows (class token) are kept as they are; the grid is resized like the official
  code, `scipy.ndimage.zoom(order=1)` (corners aligned), separately per axis so non-square
  grids (e.g. 24x32 for a 384x512 input) work.
  """
  posemb = np.asarray(posemb)
  if posemb.ndim != 3 or posemb.shape[0] != 1:
    raise CheckpointError(f'position embedding must be (1, tokens, D), got {posemb.shape}')
  prefix, grid = posemb[:, :num_prefix_tokens], posemb[0, num_prefix_tokens:]
  gh, gw = old_grid or _square_grid(len(grid), 'the checkpoint position embedding')
  if gh * gw != len(grid):
    raise CheckpointError(f'old grid {gh}x{gw} does not match {len(grid)} position embeddings')
  nh, nw = new_grid
  if (nh, nw) != (gh, gw):
    logging.info('Resizing position embeddings from a %dx%d to a %dx%d grid.', gh, gw, nh, nw)
    import scipy.ndimage  # Only needed when resizing; keeps config loading light.
    grid = scipy.ndimage.zoom(grid.reshape(gh, gw, -1), (nh / gh, nw / gw, 1), order=1)
  return np.concatenate([prefix, grid.reshape(1, nh * nw, -1)], axis=1)


def fit_posemb(params: Params, model_config: Any, grid_shape: Sequence[int]) -> Params:
  """`params` with position embeddings fitted to a (rows, cols) token grid (a shallow copy).

  The one place tables are fitted (fine-tuning and the tools): a 1-D learned table ('learn')
  is resized bilinearly as officially, its grid taken as square; 2-D tables ('learn_2d') per
  axis; relative tables ('relative') by `fit_relative_posemb`; class-token rows stay. A file
  whose class-token count differs from the model's is returned unchanged, for `check_tree` to
  name the difference.
  """
  params = fit_relative_posemb(params, grid_shape)
  posembed = params.get('Transformer', {}).get('posembed_input') if 'Transformer' in params \
      else None
  if not posembed:  # Mixer, ResNet, or no learned position embeddings: nothing to fit.
    return params
  if presets.num_prefix_tokens(model_config) != _params_prefix_tokens(params):
    return params
  prefix = presets.posemb_prefix_tokens(model_config)
  gh, gw = grid_shape
  fitted = dict(posembed)
  if 'pos_embedding' in posembed:
    n = np.shape(posembed['pos_embedding'])[1] - prefix
    side = presets.square_side(n)
    if n != gh * gw or (side is not None and (side, side) != (gh, gw)):
      logging.info('Fitting position embeddings of %d grid tokens to a %dx%d grid.', n, gh, gw)
      fitted['pos_embedding'] = resize_posemb(posembed['pos_embedding'], (gh, gw),
                                              num_prefix_tokens=prefix)
  for name, size in (('pos_embedding_row', gh), ('pos_embedding_col', gw)):
    if name in posembed and np.shape(posembed[name])[0] != size:
      table = np.asarray(posembed[name])
      fitted[name] = resize_posemb(table[None], (size, 1), num_prefix_tokens=0,
                                   old_grid=(len(table), 1))[0]
  return {**params, 'Transformer': {**params['Transformer'], 'posembed_input': fitted}}


def resize_relative_table(table: np.ndarray, new_grid: Sequence[int]) -> np.ndarray:
  """A (2gh-1, 2gw-1, ...) per-offset table bilinearly resized for a `new_grid` patch grid.

  Corners stay aligned (`scipy.ndimage.zoom(order=1)`, as `resize_posemb`), so the largest
  offsets map onto the new largest offsets and offset 0 stays at the centre: offset d of the
  new grid reads the old table at d * (gh - 1) / (nh - 1).
  """
  table = np.asarray(table)
  rows, cols = 2 * new_grid[0] - 1, 2 * new_grid[1] - 1
  if table.shape[:2] == (rows, cols):
    return table
  import scipy.ndimage  # Only needed when resizing; keeps config loading light.
  zoom = (rows / table.shape[0], cols / table.shape[1]) + (1,) * (table.ndim - 2)
  return scipy.ndimage.zoom(table, zoom, order=1)


def fit_relative_posemb(params: Params, grid_shape: Sequence[int]) -> Params:
  """`params` with every block's relative table (`posemb='relative'`) fitted to `grid_shape`.

  The prefix keys (`rel_embedding_prefix`) have no offset and stay; trees without relative
  tables are returned as they are.
  """
  encoder = params.get('Transformer') if isinstance(params, Mapping) else None
  if not encoder:
    return params
  fitted = dict(encoder)
  for name, block in encoder.items():
    relative = block.get('relative_posemb') if isinstance(block, Mapping) else None
    if relative is None:
      continue
    table = relative['rel_embedding']
    if np.shape(table)[:2] != (2 * grid_shape[0] - 1, 2 * grid_shape[1] - 1):
      logging.info('Resizing %s relative position table %s to a %dx%d grid.', name,
                   np.shape(table)[:2], *grid_shape)
      table = resize_relative_table(table, grid_shape)
    fitted[name] = {**block, 'relative_posemb': {**relative, 'rel_embedding': table}}
  return {**params, 'Transformer': fitted}


def _posemb_grid(params: Mapping[str, Any], model_config: Any) -> Optional[Tuple[int, int]]:
  """The token grid a param tree's position embeddings are for (1-D tables: square)."""
  relative = params.get('Transformer', {}).get('encoderblock_0', {}).get('relative_posemb')
  if relative is not None:
    rows, cols = np.shape(relative['rel_embedding'])[:2]
    return (rows + 1) // 2, (cols + 1) // 2
  posembed = params.get('Transformer', {}).get('posembed_input', {})
  if 'pos_embedding_row' in posembed:
    return len(posembed['pos_embedding_row']), len(posembed['pos_embedding_col'])
  if 'pos_embedding' in posembed:
    n = np.shape(posembed['pos_embedding'])[1] - presets.posemb_prefix_tokens(model_config)
    return _square_grid(n, 'the model')
  return None



def head_order(trained: Sequence[str], wanted: Sequence[str], source: str) -> Optional[List[int]]:
  """Which of a kept head's outputs (classes `trained`) gives each class of `wanted`.

  Returns:
    The output index of each wanted class, or None when the order is already the same.

  Raises:
    CheckpointError: the two sets of class names differ (naming the classes on each side only).
  """
  trained, wanted = list(trained), list(wanted)
  if trained == wanted:
    return None
  gone = [name for name in trained if name not in wanted]
  new = [name for name in wanted if name not in trained]
  if gone or new or len(set(trained)) != len(trained) or len(trained) != len(wanted):
    raise CheckpointError(
        f'keep_head: the head of {source} is for other classes than the dataset\'s: '
        f'{class_list(gone)} only in the file, {class_list(new)} only in the dataset '
        f'({len(trained)} and {len(wanted)} names); set keep_head=False for a new head, or train '
        'on the classes the head was trained on.')
  return [trained.index(name) for name in wanted]


def class_list(names: Sequence[str], limit: int = 5) -> str:
  """`['cat', 'dog']`, or the first `limit` names and how many more."""
  names = list(names)
  return str(names[:limit])[:-1] + f', ... {len(names) - limit} more]' if len(
      names) > limit else str(names)


def _reordered(head: Mapping[str, Any], order: Sequence[int]) -> Params:
  """A head (Dense `kernel` (D, C), `bias` (C,)) with its outputs taken in `order`."""
  return {k: np.take(np.asarray(v), order, axis=-1) for k, v in head.items()}


def _new_heads(restored: Params, init_params: Mapping[str, Any], source: str, *,
               keep_head: bool, order: Optional[Sequence[int]] = None) -> Params:
  """The model's fresh heads (`head`, and DeiT's `head_dist`), or the file's with keep_head,
  their outputs taken in `order` (`head_order`) when given."""
  restored = dict(restored)
  for name in ('head', 'head_dist'):
    head = restored.pop(name, None)
    if name not in init_params:
      continue
    fits = head is not None and all(
        np.shape(head.get(k)) == np.shape(v) for k, v in init_params[name].items())
    if keep_head and not fits:
      raise CheckpointError(f'keep_head: the {name} of {source} does not fit the model '
                            '(another number of classes); set keep_head=False for a new head.')
    if keep_head and order is not None:
      head = _reordered(head, order)
    restored[name] = head if keep_head else init_params[name]
  return restored


def _cast_like(params: Mapping[str, Any], like: Mapping[str, Any]) -> Params:
  if isinstance(params, Mapping):
    return {k: _cast_like(v, like[k]) for k, v in params.items()}
  return np.asarray(params, dtype=like.dtype) if hasattr(like, "dtype") else params




def fit_to_model(restored: Params, init_params: Mapping[str, Any], model_config: Any,
                 source: str, *, grid_shape: Optional[Sequence[int]] = None,
                 keep_head: bool = False, head_order: Optional[Sequence[int]] = None) -> Params:
  """`restored` (a pretrained tree) fitted to the model of `init_params` (official semantics).

  The head comes from `init_params` unless `keep_head` (its outputs in `head_order`, from
  the function of that name, when given); `representation_size=None` drops
  `pre_logits`; position embeddings are fitted to `grid_shape` (else the model's, square);
  Swin tables to the model's window. Anything else that does not fit raises one short error.
  """
  restored = _new_heads(restored, init_params, source, keep_head=keep_head, order=head_order)
  if model_config.get('representation_size') is None and 'pre_logits' in restored:
    logging.info('load_pretrained: dropping pre_logits (representation_size=None).')
    del restored['pre_logits']
  elif 'pre_logits' in init_params and 'pre_logits' not in restored:
    logging.warning('load_pretrained: %s has no pre_logits; using a fresh one.', source)
    restored['pre_logits'] = init_params['pre_logits']
  grid = grid_shape or _posemb_grid(init_params, model_config)
  if grid is not None:
    restored = fit_posemb(restored, model_config, grid)
  # The family's own tables (Swin's, for another window or resolution: as timm).
  restored = architecture.reader_of(presets.family_of(model_config)).fit(restored, init_params)
  check_tree(restored, init_params, source)
  return _cast_like(restored, init_params)
