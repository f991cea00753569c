"""Published `.npz` checkpoints: download + cache, load into the Linen tree, save, surgery.

The published files are flat `np.savez` archives with '/'-joined names. Two legacy details are
handled here and nowhere else (see shared FORMATS notes): encoder blocks use the pre-Linen
numbering (LayerNorm_0, MultiHeadDotProductAttention_1, LayerNorm_2, MlpBlock_3), and hybrid
GroupNorm scale/bias are stored as (1, 1, 1, C).
"""

import http.client
import csv
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np
from absl import logging

Params = Dict[str, Any]

# Where the official checkpoints are published (public buckets, readable over https too).
PUBLISHED_DIRS = {
    'imagenet21k': 'gs://vit_models/imagenet21k',
    'imagenet21k+imagenet2012': 'gs://vit_models/imagenet21k+imagenet2012',
    'augreg': 'gs://vit_models/augreg',
    'sam': 'gs://vit_models/sam',
    'mixer-imagenet21k': 'gs://mixer_models/imagenet21k',
    'mixer-imagenet1k': 'gs://mixer_models/imagenet1k',
}
DEFAULT_PRETRAINED_DIR = PUBLISHED_DIRS['imagenet21k']

_LINEN_TO_PUBLISHED_BLOCK = {
    'LayerNorm_0': 'LayerNorm_0',
    'MultiHeadDotProductAttention_0': 'MultiHeadDotProductAttention_1',
    'LayerNorm_1': 'LayerNorm_2',
    'MlpBlock_0': 'MlpBlock_3',
}
_GROUPNORM = re.compile(r'^gn(\d+|_root|_proj)$')
_NUMBERED = re.compile(r'^(.*)_(\d+)$')
_ENCODER_BLOCK = re.compile(r'^encoderblock_\d+$')


class CheckpointError(ValueError):
  """A checkpoint that is missing, unreadable or does not fit the model."""


def default_cache_dir() -> str:
  """`$VIT_JAX_CHECKPOINTS`, else the `checkpoints/` folder beside the `vit_jax` package."""
  here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  return os.environ.get('VIT_JAX_CHECKPOINTS', os.path.join(here, 'checkpoints'))


def is_remote(path: str) -> bool:
  return path.startswith(('gs://', 'http://', 'https://'))


def _https_url(path: str) -> str:
  """gs://bucket/key → the bucket's public https address (no credentials needed)."""
  if path.startswith('gs://'):
    return 'https://storage.googleapis.com/' + path[len('gs://'):]
  return path


def cache_path(path: str, cache_dir: Optional[str] = None) -> str:
  """Local cache file of a remote checkpoint, keeping bucket/host and folders apart."""
  parsed = urllib.parse.urlparse(path)
  return os.path.join(cache_dir or default_cache_dir(), parsed.netloc, parsed.path.lstrip('/'))


def download(url: str, dest: str, *, progress: bool = True) -> str:
  """Downloads `url` to `dest` atomically: a cut download never poses as a finished file."""
  os.makedirs(os.path.dirname(dest) or '.', exist_ok=True)
  tmp = f'{dest}.tmp-{os.getpid()}'
  try:
    with urllib.request.urlopen(url, timeout=60) as response, open(tmp, 'wb') as out:
      total = int(response.headers.get('Content-Length') or 0)
      _copy_with_progress(response, out, total, os.path.basename(dest), progress)
    if total and os.path.getsize(tmp) != total:
      raise CheckpointError(f'download of {url} stopped at {os.path.getsize(tmp)} of {total} '
                            'bytes; run again to retry.')
    os.replace(tmp, dest)
  except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
    raise CheckpointError(
        f'Could not download {url} ({getattr(e, "reason", e)}). Without internet, copy the file '
        f'to {dest} or point the config at a local file (--config.pretrained_dir=DIR).') from None
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)
  return dest


def _copy_with_progress(src, dst, total: int, label: str, progress: bool) -> None:
  import tqdm  # Only needed when downloading.
  with tqdm.tqdm(total=total or None, unit='B', unit_scale=True, desc=label,
                 disable=not progress, file=sys.stderr) as bar:
    while chunk := src.read(1 << 20):
      dst.write(chunk)
      bar.update(len(chunk))


def resolve(path: str, cache_dir: Optional[str] = None) -> str:
  """A local file for `path`: itself, or its cached download (fetched once) if remote."""
  if is_remote(path):
    local = cache_path(path, cache_dir)
    if not os.path.exists(local):
      logging.info('Downloading %s to %s', path, local)
      download(_https_url(path), local)
    return local
  if not os.path.isfile(path):
    raise CheckpointError(
        f'Could not find checkpoint "{path}". Download it from {DEFAULT_PRETRAINED_DIR} (see '
        'checkpoints/README.md) or set --config.pretrained_dir to the folder that has it.')
  return path


def check_available(path: str, cache_dir: Optional[str] = None) -> Optional[str]:
  """None if `path` can be loaded (local, cached, or reachable remote), else why not.

  A cheap pre-flight (a HEAD request for remote files) so a run can report every missing input
  at once before spending time on data or compilation.
  """
  if not is_remote(path):
    return None if os.path.isfile(path) else (
        f'checkpoint "{path}" not found: download it from {DEFAULT_PRETRAINED_DIR} '
        '(see checkpoints/README.md) or set --config.pretrained_path / --config.pretrained_dir')
  if os.path.exists(cache_path(path, cache_dir)):
    return None
  try:
    request = urllib.request.Request(_https_url(path), method='HEAD')
    with urllib.request.urlopen(request, timeout=20):
      return None
  except (urllib.error.URLError, OSError) as e:
    return (f'checkpoint {path} cannot be downloaded ({getattr(e, "reason", e)}): copy it to '
            f'{cache_path(path, cache_dir)} or pass --config.pretrained_path=/local/file.npz')


def read_npz(path: str) -> Dict[str, np.ndarray]:
  """Flat {name: array} of an .npz file, never unpickling; clear errors for broken files."""
  try:
    archive = np.load(path, allow_pickle=False)
    if not isinstance(archive, np.lib.npyio.NpzFile):
      raise CheckpointError(f'{path} is a single .npy array, not an .npz checkpoint.')
    with archive:
      return {name: archive[name] for name in archive.files}
  except (zipfile.BadZipFile, EOFError, OSError, ValueError) as e:
    if isinstance(e, CheckpointError):
      raise
    raise CheckpointError(f'{path} is not a readable .npz checkpoint ({e}); it may be truncated '
                          'or corrupt: delete it and download or export it again.') from None


def unflatten(flat: Mapping[str, Any], sep: str = '/') -> Params:
  tree: Params = {}
  for name, value in flat.items():
    *parents, leaf = name.split(sep)
    node = tree
    for part in parents:
      node = node.setdefault(part, {})
    node[leaf] = value
  return tree


def flatten(tree: Mapping[str, Any], prefix: str = '', sep: str = '/') -> Dict[str, Any]:
  flat = {}
  for key, value in tree.items():
    name = f'{prefix}{sep}{key}' if prefix else key
    if isinstance(value, Mapping):
      flat.update(flatten(value, name, sep))
    else:
      flat[name] = value
  return flat


def renumber_pre_linen(tree: Params) -> Params:
  """Renumbers `Type_N` siblings per type in order of N (pre-Linen → Linen); idempotent.

  In an encoder block, LayerNorm_0/MultiHeadDotProductAttention_1/LayerNorm_2/MlpBlock_3
  become LayerNorm_0/MultiHeadDotProductAttention_0/LayerNorm_1/MlpBlock_0.
  """
  groups: Dict[str, list] = {}
  for key in tree:
    match = _NUMBERED.match(key)
    if match:
      groups.setdefault(match.group(1), []).append((int(match.group(2)), key))
  renamed = {}
  for prefix, members in groups.items():
    for new_index, (_, key) in enumerate(sorted(members)):
      renamed[key] = f'{prefix}_{new_index}'
  return {renamed.get(key, key): renumber_pre_linen(value) if isinstance(value, Mapping) else value
          for key, value in tree.items()}


def _squeeze_groupnorm(flat: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
  """(1, 1, 1, C) GroupNorm scale/bias of published hybrids → (C,) as current Flax expects."""
  out = {}
  for name, value in flat.items():
    parts = name.split('/')
    if len(parts) > 1 and _GROUPNORM.match(parts[-2]) and parts[-1] in ('scale', 'bias'):
      value = value.reshape(-1)
    out[name] = value
  return out


def params_from_flat(flat: Mapping[str, np.ndarray]) -> Params:
  """Published flat names (pre-Linen or Linen) → the Linen param tree."""
  return renumber_pre_linen(unflatten(_squeeze_groupnorm(dict(flat))))


def params_to_flat(params: Mapping[str, Any]) -> Dict[str, np.ndarray]:
  """Linen param tree → flat arrays with the published (pre-Linen) names and GroupNorm shapes."""
  out = {}
  for name, value in flatten(params).items():
    parts = name.split('/')
    for i, part in enumerate(parts[:-1]):
      if _ENCODER_BLOCK.match(part) and i + 1 < len(parts):
        parts[i + 1] = _LINEN_TO_PUBLISHED_BLOCK.get(parts[i + 1], parts[i + 1])
    array = np.asarray(value)
    if len(parts) > 1 and _GROUPNORM.match(parts[-2]) and parts[-1] in ('scale', 'bias'):
      array = array.reshape(1, 1, 1, -1)
    if array.dtype != np.float32 and 'float' in array.dtype.name:  # incl. ml_dtypes bfloat16
      array = array.astype(np.float32)  # bf16 has no .npz dtype; published files are float32.
    out['/'.join(parts)] = array
  return out


def load(path: str, cache_dir: Optional[str] = None) -> Params:
  """Loads a published .npz (local path, gs:// or https://) into the Linen param tree."""
  return params_from_flat(read_npz(resolve(path, cache_dir)))


def save(params: Mapping[str, Any], path: str) -> str:
  """Writes `params` as a published-layout .npz (atomic: temp file, then rename)."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = f'{path}.tmp-{os.getpid()}.npz'
  try:
    np.savez(tmp, **params_to_flat(params))
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)
  return path


def best_augreg_filename(name: str, directory: str = PUBLISHED_DIRS['augreg'],
                         cache_dir: Optional[str] = None) -> str:
  """The AugReg ImageNet-21k pre-training file of model `name` (e.g. 'B_16') with the best
  final upstream validation accuracy, read from `directory`/index.csv (as the official code).
  """
  with open(resolve(f'{directory.rstrip("/")}/index.csv', cache_dir), newline='') as f:
    rows = [row for row in csv.DictReader(f)
            if row['filename'].split('-')[0] == name and row['ds'] == 'i21k']
  if not rows:
    raise CheckpointError(f'No i21k AugReg checkpoint for {name!r} in {directory}/index.csv; '
                          'pass the full file name (without .npz) instead.')
  best = max(rows, key=lambda row: float(row['final_val']))
  logging.info('AugReg: picked %s for %s (final_val=%s).', best['filename'], name,
               best['final_val'])
  return best['filename']


def check_tree(params: Mapping[str, Any], expected: Mapping[str, Any], source: str) -> None:
  """Raises one CheckpointError naming every missing, extra and misshaped parameter."""
  got = {k: np.shape(v) for k, v in flatten(params).items()}
  want = {k: np.shape(v) for k, v in flatten(expected).items()}
  missing = sorted(want.keys() - got.keys())
  extra = sorted(got.keys() - want.keys())
  misshaped = [f'{k} {got[k]} vs model {want[k]}' for k in sorted(got.keys() & want.keys())
               if got[k] != want[k]]
  if missing or extra or misshaped:
    parts = [f'{label}: {", ".join(items[:20])}{" ..." if len(items) > 20 else ""}'
             for label, items in (('missing', missing), ('extra', extra),
                                  ('misshaped', misshaped)) if items]
    raise CheckpointError(f'{source} does not fit the model ({"; ".join(parts)}); is it a '
                          'checkpoint of another model (check --config.model)?')


def _square_grid(num_tokens: int, what: str) -> Tuple[int, int]:
  side = int(round(np.sqrt(num_tokens)))
  if side * side != num_tokens:
    raise CheckpointError(f'{what} has {num_tokens} grid tokens, which is not a square grid; '
                          'pass its grid shape explicitly.')
  return side, side


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


def load_pretrained(*, pretrained_path: str, init_params: Mapping[str, Any], model_config: Any,
                    grid_shape: Optional[Sequence[int]] = None,
                    cache_dir: Optional[str] = None, keep_head: bool = False) -> Params:
  """Adapts a pretrained checkpoint for fine-tuning (official semantics).

  The head comes from `init_params` (new task); `representation_size=None` drops `pre_logits`;
  position embeddings are resized to the model's grid (`grid_shape`, or square). Anything else
  that does not fit raises one error listing the differing names.

  Args:
    pretrained_path: local .npz, gs:// or https:// path.
    init_params: freshly initialised params of the fine-tuning model.
    model_config: the model's ConfigDict/dict (classifier, representation_size).
    grid_shape: (rows, cols) token grid of the fine-tuning model; needed for non-square inputs.
    cache_dir: where remote files are cached (default: `checkpoints/`).
    keep_head: keep the checkpoint's head (same label set, e.g. fine-tuning at a higher
      resolution on the pretraining dataset); by default it is replaced, as officially.

  Returns:
    A param tree shaped like `init_params`.
  """
  restored = load(pretrained_path, cache_dir)
  if model_config.get('representation_size') is None and 'pre_logits' in restored:
    logging.info('load_pretrained: dropping pre_logits (representation_size=None).')
    del restored['pre_logits']
  elif 'pre_logits' in init_params and 'pre_logits' not in restored:
    logging.warning('load_pretrained: %s has no pre_logits; using a fresh one.', pretrained_path)
    restored['pre_logits'] = init_params['pre_logits']
  head = restored.pop('head', None)
  if 'head' in init_params:
    fits = head is not None and all(
        np.shape(head.get(k)) == np.shape(v) for k, v in init_params['head'].items())
    if keep_head and not fits:
      raise CheckpointError(f'keep_head: the head of {pretrained_path} does not fit the model '
                            '(another number of classes); set keep_head=False for a new head.')
    restored['head'] = head if keep_head else init_params['head']
  _resize_posemb_to(restored, init_params, model_config, grid_shape)
  check_tree(restored, init_params, pretrained_path)
  return _cast_like(restored, init_params)


def _resize_posemb_to(restored: Params, init_params: Mapping[str, Any], model_config: Any,
                      grid_shape: Optional[Sequence[int]]) -> None:
  try:
    old = restored['Transformer']['posembed_input']['pos_embedding']
    new = init_params['Transformer']['posembed_input']['pos_embedding']
  except KeyError:
    return
  if old.shape == new.shape:
    return
  # Class-token rows: the checkpoint has one iff it has `cls`; a mismatch with the model (gap vs
  # token) is left for check_tree to report by name.
  num_prefix = 1 if 'cls' in restored else 0
  if num_prefix != (1 if 'cls' in init_params else 0):
    return
  new_grid = grid_shape or _square_grid(new.shape[1] - num_prefix, 'the model')
  restored['Transformer']['posembed_input']['pos_embedding'] = resize_posemb(
      old, new_grid, num_prefix_tokens=num_prefix)


def _cast_like(params: Mapping[str, Any], like: Mapping[str, Any]) -> Params:
  if isinstance(params, Mapping):
    return {k: _cast_like(v, like[k]) for k, v in params.items()}
  return np.asarray(params, dtype=like.dtype) if hasattr(like, "dtype") else params
