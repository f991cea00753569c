"""Published `.npz` checkpoints: download + cache, load into the Linen tree, save, surgery.

timm-format checkpoints (a hub folder, a `.safetensors` file, `hf-hub:timm/<name>`) are read
through `vit_jax.timm_format` behind the same API (`resolve_name`, `load`, `load_architecture`,
`load_pretrained`).

The published files are flat `np.savez` archives with '/'-joined names. Two legacy details are
handled here and nowhere else (see shared FORMATS notes): encoder blocks use the pre-Linen
numbering (LayerNorm_0, MultiHeadDotProductAttention_1, LayerNorm_2, MlpBlock_3), and hybrid
GroupNorm scale/bias are stored as (1, 1, 1, C).

What shapes cannot tell (position-embedding kind, pooling, dropout, resolution, label names)
travels with an exported file as JSON in the zip archive's comment (`embedded_metadata`):
every copy and rename keeps it, and `np.load` (hence the official code and timm) never sees it,
so the keys stay exactly the published ones.
"""

import csv
import dataclasses
import http.client
import json
import math
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import ml_collections
import numpy as np
from absl import logging

from vit_jax import presets
from vit_jax.checkpoints import swin_timm
from vit_jax.checkpoints import timm_format

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
# A bare published name ('ViT-B_16') is looked up here: these files carry real ImageNet-1k heads
# (the plain imagenet21k files have all-zero heads).
DEFAULT_NAMED_COLLECTION = 'imagenet21k+imagenet2012'
# What a run exports beside its metadata (train.py writes both into the run directory).
PARAMS_FILE = 'params.npz'
METADATA_FILE = 'metadata.json'
# Marks a zip comment written by `save(..., metadata=...)`; a zip comment holds 65535 bytes.
_COMMENT_TAG = b'vit_jax metadata v1\n'
_MAX_COMMENT = 65535

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


def _timm_load(path: str) -> 'timm_format.Converted':
  try:
    return timm_format.load(path)
  except timm_format.TimmFormatError as e:
    raise CheckpointError(str(e)) from None


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


def resolve_name(path_or_name: str) -> str:
  """The .npz path or URL that `path_or_name` stands for (nothing is downloaded yet).

  Accepts a local .npz, a run directory (its `params.npz`), a gs:// or https:// URL, or a
  published name: 'ViT-B_16' (from `DEFAULT_NAMED_COLLECTION`), '<collection>/<file stem>'
  with a collection of `PUBLISHED_DIRS` ('imagenet21k/ViT-L_16', 'augreg/S_16-i21k-...').
  timm-format sources (hub folder, `.safetensors` file, `hf-hub:` name) stand for themselves.
  """
  if is_remote(path_or_name) or timm_format.is_timm_source(path_or_name):
    return path_or_name
  if os.path.isdir(path_or_name):
    path = os.path.join(path_or_name, PARAMS_FILE)
    if not os.path.isfile(path):
      raise CheckpointError(f'Run directory "{path_or_name}" has no {PARAMS_FILE} (a run writes '
                            'it when training ends); pass an .npz file or a finished run.')
    return path
  if os.path.exists(path_or_name):
    return path_or_name
  collection, _, name = path_or_name.rpartition('/')
  if not name.endswith('.npz') and collection in ('', *PUBLISHED_DIRS):
    return f'{PUBLISHED_DIRS[collection or DEFAULT_NAMED_COLLECTION]}/{name}.npz'
  return path_or_name


def pretrained_path(config: Any) -> Optional[str]:
  """The .npz a fine-tuning run starts from, or None to train from scratch.

  `config.pretrained_path` (file, run directory, URL or published name) wins; else
  `config.pretrained_dir`/<name>.npz with the name `config.model_or_filename` (an AugReg model
  name like 'B_16' picks its best i21k file from the folder's index.csv, as officially) or the
  model's `model_name`.
  """
  if config.pretrained_path:
    return resolve_name(config.pretrained_path)
  directory = config.pretrained_dir
  if not directory:
    return None
  name = config.model_or_filename or config.model.model_name
  if config.model_or_filename and '-' not in name:
    name = best_augreg_filename(name, directory)
  return f'{directory.rstrip("/")}/{name}.npz'


def check_available(path: str, cache_dir: Optional[str] = None) -> Optional[str]:
  """None if `path` can be loaded (local, cached, or reachable remote), else why not.

  A cheap pre-flight (a HEAD request for remote files) so a run can report every missing input
  at once before spending time on data or compilation.
  """
  if timm_format.is_timm_source(path):
    # Hub names are fetched (or found offline in huggingface_hub's cache) when loading.
    return None if path.startswith(timm_format.HF_PREFIX) or os.path.exists(path) else (
        f'timm checkpoint "{path}" not found: pass a hub folder (config.json + '
        'model.safetensors), a .safetensors file or hf-hub:timm/<name>')
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
  """Loads a published .npz (local path, gs:// or https://) or a timm-format checkpoint
  (see `timm_format.is_timm_source`) into the Linen param tree."""
  if timm_format.is_timm_source(path):
    return _timm_load(path).params
  return params_from_flat(read_npz(resolve(path, cache_dir)))


def load_architecture(path: str, cache_dir: Optional[str] = None
                      ) -> Tuple[Params, 'Architecture']:
  """(Linen params, Architecture) of a checkpoint: an npz's from its shapes (`architecture`),
  a timm file's from its shapes and config.json (with its input size, mean and std)."""
  if not timm_format.is_timm_source(path):
    params = load(path, cache_dir)
    return params, architecture(params)
  converted = _timm_load(path)
  arch = Architecture(config=ml_collections.ConfigDict(converted.model_config),
                      num_classes=converted.num_classes, grid=None,
                      image_size=converted.image_size, assumed=converted.assumed,
                      mean=converted.mean, std=converted.std)
  return converted.params, arch


def save(params: Mapping[str, Any], path: str,
         metadata: Optional[Mapping[str, Any]] = None) -> str:
  """Writes `params` as a published-layout .npz (atomic: temp file, then rename).

  Args:
    params: the Linen param tree.
    path: the .npz to write.
    metadata: a description (`describe_run`) embedded in the archive's comment, so that the
      file says what it is under any name; the arrays and their keys are unchanged.
  """
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = f'{path}.tmp-{os.getpid()}.npz'
  try:
    np.savez(tmp, **params_to_flat(params))
    if metadata is not None:
      _embed_metadata(tmp, metadata)
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


def _names(items: Sequence[str], limit: int) -> str:
  shown = ', '.join(items[:limit])
  return f'{shown}, ...' if len(items) > limit else shown


def check_tree(params: Mapping[str, Any], expected: Mapping[str, Any], source: str) -> None:
  """Raises one short CheckpointError (counts, first names, likely cause) if the trees differ."""
  got = {k: np.shape(v) for k, v in flatten(params).items()}
  want = {k: np.shape(v) for k, v in flatten(expected).items()}
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


def num_prefix_tokens(model_config: Any) -> int:
  """Tokens before the patch grid: the class token of 'token*' classifiers, the distillation
  token and the register tokens (0 for Mixers and ResNets)."""
  if presets.is_mixer(model_config) or presets.is_resnet(model_config):
    return 0
  cls = model_config['classifier'] in ('token', 'token_unpooled', 'token_gap')
  return (int(cls) + int(bool(model_config.get('distilled')))
          + int(model_config.get('num_registers') or 0))


def posemb_prefix_tokens(model_config: Any) -> int:
  """Rows of the position table before the grid: the prefix tokens, none with no_embed_class."""
  if presets.is_mixer(model_config) or model_config.get('no_embed_class'):
    return 0
  return num_prefix_tokens(model_config)


def _params_prefix_tokens(params: Mapping[str, Any]) -> int:
  return (int('cls' in params) + int('dist' in params)
          + (np.shape(params['reg'])[1] if 'reg' in params else 0))


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


def fit_posemb(params: Params, model_config: Any, grid_shape: Sequence[int]) -> Params:
  """`params` with position embeddings fitted to a (rows, cols) token grid (a shallow copy).

  The one place tables are fitted (fine-tuning and the tools): a 1-D learned table ('learn')
  is resized bilinearly as officially, its grid taken as square; 2-D tables ('learn_2d') per
  axis; class-token rows stay. A file whose class-token count differs from the model's is
  returned unchanged, for `check_tree` to name the difference.
  """
  posembed = params.get('Transformer', {}).get('posembed_input') if 'Transformer' in params \
      else None
  if not posembed:  # Mixer, ResNet, or no learned position embeddings: nothing to fit.
    return params
  if num_prefix_tokens(model_config) != _params_prefix_tokens(params):
    return params
  prefix = posemb_prefix_tokens(model_config)
  gh, gw = grid_shape
  fitted = dict(posembed)
  if 'pos_embedding' in posembed:
    n = np.shape(posembed['pos_embedding'])[1] - prefix
    side = math.isqrt(n)
    if n != gh * gw or (side * side == n and (side, side) != (gh, gw)):
      logging.info('Fitting position embeddings of %d grid tokens to a %dx%d grid.', n, gh, gw)
      fitted['pos_embedding'] = resize_posemb(posembed['pos_embedding'], (gh, gw),
                                              num_prefix_tokens=prefix)
  for name, size in (('pos_embedding_row', gh), ('pos_embedding_col', gw)):
    if name in posembed and np.shape(posembed[name])[0] != size:
      table = np.asarray(posembed[name])
      fitted[name] = resize_posemb(table[None], (size, 1), num_prefix_tokens=0,
                                   old_grid=(len(table), 1))[0]
  return {**params, 'Transformer': {**params['Transformer'], 'posembed_input': fitted}}


def _posemb_grid(params: Mapping[str, Any], model_config: Any) -> Optional[Tuple[int, int]]:
  """The token grid a param tree's position embeddings are for (1-D tables: square)."""
  posembed = params.get('Transformer', {}).get('posembed_input', {})
  if 'pos_embedding_row' in posembed:
    return len(posembed['pos_embedding_row']), len(posembed['pos_embedding_col'])
  if 'pos_embedding' in posembed:
    n = np.shape(posembed['pos_embedding'])[1] - posemb_prefix_tokens(model_config)
    return _square_grid(n, 'the model')
  return None


def load_pretrained(*, pretrained_path: str, init_params: Mapping[str, Any], model_config: Any,
                    grid_shape: Optional[Sequence[int]] = None,
                    cache_dir: Optional[str] = None, keep_head: bool = False) -> Params:
  """Adapts a pretrained checkpoint for fine-tuning (official semantics).

  The head comes from `init_params` (new task); `representation_size=None` drops `pre_logits`;
  position embeddings are fitted to the model's grid (`grid_shape`, or square). Anything else
  that does not fit raises one short error naming the first differing names.

  Args:
    pretrained_path: local .npz, run directory, gs:// or https:// path, or a published name
      (see `resolve_name`).
    init_params: freshly initialised params of the fine-tuning model.
    model_config: the model's ConfigDict/dict (classifier, representation_size).
    grid_shape: (rows, cols) token grid of the fine-tuning model; needed for non-square inputs.
    cache_dir: where remote files are cached (default: `checkpoints/`).
    keep_head: keep the checkpoint's head (same label set, e.g. fine-tuning at a higher
      resolution on the pretraining dataset); by default it is replaced, as officially.

  Returns:
    A param tree shaped like `init_params`.
  """
  path = resolve_name(pretrained_path)
  restored = load(path, cache_dir)
  if not timm_format.is_timm_source(path):
    _warn_if_described_otherwise(path, model_config)
  restored = _new_heads(restored, init_params, pretrained_path, keep_head=keep_head)
  if model_config.get('representation_size') is None and 'pre_logits' in restored:
    logging.info('load_pretrained: dropping pre_logits (representation_size=None).')
    del restored['pre_logits']
  elif 'pre_logits' in init_params and 'pre_logits' not in restored:
    logging.warning('load_pretrained: %s has no pre_logits; using a fresh one.', pretrained_path)
    restored['pre_logits'] = init_params['pre_logits']
  grid = grid_shape or _posemb_grid(init_params, model_config)
  if grid is not None:
    restored = fit_posemb(restored, model_config, grid)
  if presets.is_swin(model_config):  # Another window or resolution: tables resized as timm.
    restored = swin_timm.fit_relative_position_tables(restored, init_params)
  check_tree(restored, init_params, pretrained_path)
  return _cast_like(restored, init_params)


def _warn_if_described_otherwise(path: str, model_config: Any) -> None:
  """One warning when a file's description gives another posemb/classifier than the config.

  Neither has parameters of its own in every case (sincos2d vs none; token vs token_unpooled),
  so the shapes fit and fine-tuning would silently start from another model than was trained.
  """
  described = (read_metadata(path) or {}).get('model') or {}
  if not described or presets.is_mixer(model_config) or presets.is_resnet(model_config):
    return
  config = _full_vit(model_config)  # Fields a preset leaves out take the official defaults.
  changed = [f'{key} {described[key]!r} in the file, {config[key]!r} in the config'
             for key in ('posemb', 'classifier')
             if key in described and described[key] != config[key]]
  if changed:
    logging.warning('load_pretrained: %s was trained with another model: %s; set '
                    '--config.model.<field> to the file\'s value to fine-tune the model it holds.',
                    path, '; '.join(changed))


def _new_heads(restored: Params, init_params: Mapping[str, Any], source: str, *,
               keep_head: bool) -> Params:
  """The model's fresh heads (`head`, and DeiT's `head_dist`), or the file's with keep_head."""
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
    restored[name] = head if keep_head else init_params[name]
  return restored


def _cast_like(params: Mapping[str, Any], like: Mapping[str, Any]) -> Params:
  if isinstance(params, Mapping):
    return {k: _cast_like(v, like[k]) for k, v in params.items()}
  return np.asarray(params, dtype=like.dtype) if hasattr(like, "dtype") else params


@dataclasses.dataclass(frozen=True)
class Architecture:
  """What a checkpoint's shapes say it is (see `architecture`).

  Attributes:
    config: model ConfigDict for `models.get_model(config, num_classes=num_classes)`: the
      official fields (plus `presets.VIT_EXTRAS` for ViTs, with `posemb` from the file).
    num_classes: outputs of the head; 0 without one.
    grid: (rows, cols) token grid the position embeddings were trained at, or None.
    image_size: grid × token stride in pixels (the training resolution), or None.
    assumed: what the shapes cannot decide, each with the value used ('dropout_rate 0.1 (from
      ViT-L_16)', 'classifier token (or token_unpooled)', ...).
    mean: per-channel mean of the [0, 1] input (official: 0.5, i.e. x / 127.5 - 1).
    std: per-channel std of the same (official: 0.5).
  """

  config: ml_collections.ConfigDict
  num_classes: int
  grid: Optional[Tuple[int, int]]
  image_size: Optional[int]
  assumed: Tuple[str, ...]
  mean: Tuple[float, ...] = timm_format.OFFICIAL_MEAN
  std: Tuple[float, ...] = timm_format.OFFICIAL_STD

  @property
  def model_name(self) -> str:
    return self.config.model_name


def _shape_tree(params: Mapping[str, Any]) -> Dict[str, Any]:
  """{Linen name: shape} as a tree, from a flat published dict or a (Linen) param tree."""
  flat = flatten(params) if any(isinstance(v, Mapping) for v in params.values()) else params
  shapes = {name: tuple(getattr(v, 'shape', np.shape(v))) for name, v in flat.items()}
  return renumber_pre_linen(unflatten(shapes))


def _count(tree: Mapping[str, Any], pattern: str) -> int:
  return sum(1 for key in tree if re.fullmatch(pattern, key))


def _mixer_fields(tree: Mapping[str, Any]) -> Tuple[Dict[str, Any], Tuple[int, int]]:
  stem = tree['stem']['kernel']
  block = tree['MixerBlock_0']
  tokens = block['token_mixing']['Dense_0']['kernel'][0]
  side = math.isqrt(tokens)
  fields = dict(patches={'size': tuple(stem[:2])}, hidden_dim=stem[3],
                num_blocks=_count(tree, r'MixerBlock_\d+'),
                tokens_mlp_dim=block['token_mixing']['Dense_0']['kernel'][1],
                channels_mlp_dim=block['channel_mixing']['Dense_0']['kernel'][1])
  return fields, ((side, side) if side * side == tokens else None)


def _resnet_fields(tree: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
  if 'conv_root' not in tree:
    return None
  width = tree['conv_root']['kernel'][3]
  stages = _count(tree, r'block\d+')
  units = tuple(_count(tree[f'block{s + 1}'], r'unit\d+') for s in range(stages))
  factor = width / 64
  return dict(num_layers=units, width_factor=int(factor) if factor == int(factor) else factor)


def _vit_fields(tree: Mapping[str, Any]) -> Tuple[Dict[str, Any], Optional[Tuple[int, int]]]:
  """Shape-decidable ViT fields and the trained token grid."""
  encoder = tree['Transformer']
  block = encoder['encoderblock_0']
  hidden = tree['embedding']['kernel'][3]
  _, heads, head_dim = block['MultiHeadDotProductAttention_0']['query']['kernel']
  if heads * head_dim != hidden:
    raise CheckpointError(f'attention width {heads}x{head_dim} differs from the hidden size '
                          f'{hidden}; this model family cannot run such a checkpoint.')
  posembed = encoder.get('posembed_input', {})
  prefix = 1 if 'cls' in tree else 0
  grid = None
  if 'pos_embedding_row' in posembed:
    posemb = 'learn_2d'
    grid = posembed['pos_embedding_row'][0], posembed['pos_embedding_col'][0]
  elif 'pos_embedding' in posembed:
    posemb, n = 'learn', posembed['pos_embedding'][1] - prefix
    grid = (math.isqrt(n),) * 2 if math.isqrt(n)**2 == n else None
  else:
    posemb = 'sincos2d' if hidden % 4 == 0 else 'none'
  fields = dict(
      patches={'size': tuple(tree['embedding']['kernel'][:2])}, hidden_size=hidden,
      transformer=dict(mlp_dim=block['MlpBlock_0']['Dense_0']['kernel'][1], num_heads=heads,
                       num_layers=_count(encoder, r'encoderblock_\d+')),
      classifier='token' if prefix else 'gap',
      representation_size=tree['pre_logits']['kernel'][1] if 'pre_logits' in tree else None,
      posemb=posemb)
  resnet = _resnet_fields(tree)
  if resnet is not None:
    fields['resnet'] = resnet
  return fields, grid


def _resnet_classifier_fields(tree: Mapping[str, Any]) -> Dict[str, Any]:
  """Stage sizes, width and root kernel of a ResNet classifier (`models_resnet.ResNet`)."""
  stem = _resnet_fields(tree)  # The same root and units as a hybrid's stem.
  return dict(stage_sizes=stem['num_layers'], width_factor=stem['width_factor'],
              root_kernel=tree['conv_root']['kernel'][0])


def _resnet_config(fields: Dict[str, Any], name: Optional[str]) -> Tuple[Dict[str, Any], list]:
  """Completes a ResNet's shape-decided fields with the preset's root stride and pooling."""
  if name:
    preset = presets.MODEL_CONFIGS[name]
    return dict(fields, root_stride=preset.root_stride, root_pool=preset.root_pool), []
  stride = 2 if fields['root_kernel'] == 7 else 1
  config = dict(fields, root_stride=stride, root_pool=True)
  return config, [f'root stride {stride} and a max-pool after the root (shapes cannot tell)']


def _complete(config: Mapping[str, Any]) -> Dict[str, Any]:
  """`config` with the defaults of its family filled in (ViTs: the official ones)."""
  if presets.is_mixer(config) or presets.is_resnet(config) or presets.is_swin(config):
    return _plain(config)
  return _full_vit(config)


def _family(config: Mapping[str, Any]) -> str:
  if presets.is_resnet(config):
    return 'ResNet'
  if presets.is_mixer(config):
    return 'Mixer'
  if presets.is_swin(config):
    return 'Swin'
  return 'ResNet+ViT hybrid' if config.get('resnet') else 'ViT'


def _full_vit(config: Mapping[str, Any]) -> Dict[str, Any]:
  """A ViT config dict with the official defaults for fields a preset leaves out."""
  out = dict(presets.VIT_EXTRAS, representation_size=None, classifier='token')
  out.update(_plain(config))
  return out


def _plain(config: Any) -> Any:
  """ConfigDict/dict → plain dict with tuples (JSON lists of metadata become tuples)."""
  if hasattr(config, 'to_dict'):
    config = config.to_dict()
  if isinstance(config, Mapping):
    return {k: _plain(v) for k, v in config.items()}
  if isinstance(config, list):
    return tuple(_plain(v) for v in config)
  return config


def _posemb_params(posemb: str) -> str:
  return {'learn': 'learned 1-D', 'learn_2d': 'learned 2-D'}.get(posemb, 'none')


def _compared_fields(config: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
  """(label, value) of every field a checkpoint's shapes decide, in reading order."""
  if presets.is_resnet(config):
    return (('family', _family(config)), ('ResNet units per stage', tuple(config['stage_sizes'])),
            ('ResNet width factor', config['width_factor']),
            ('root kernel', config['root_kernel']))
  if presets.is_mixer(config):
    return (('family', _family(config)), ('patch size', tuple(config['patches']['size'])),
            ('hidden size', config['hidden_dim']), ('depth', config['num_blocks']),
            ('token-mixing MLP width', config['tokens_mlp_dim']),
            ('channel-mixing MLP width', config['channels_mlp_dim']))
  if presets.is_swin(config):
    return (('family', _family(config)), ('patch size', tuple(config['patches']['size'])),
            ('embedding width', config['embed_dim']), ('blocks per stage', tuple(config['depths'])),
            ('heads per stage', tuple(config['num_heads'])), ('window', config['window_size']),
            ('MLP ratio', config['mlp_ratio']))
  resnet, t = config.get('resnet'), config['transformer']  # Presets without a ResNet omit it.
  fields = (('family', _family(config)),
            ('patch size', tuple(config['patches']['size'])),
            ('hidden size', config['hidden_size']), ('depth', t['num_layers']),
            ('heads', t['num_heads']), ('MLP width', t['mlp_dim']),
            ('class token', 'yes' if num_prefix_tokens(config) else 'no'),
            ('position embedding parameters', _posemb_params(config['posemb'])))
  if resnet:
    fields += (('ResNet units per stage', tuple(resnet['num_layers'])),
               ('ResNet width factor', resnet['width_factor']))
  return fields


def first_difference(found: Any, expected: Any, expected_name: str) -> Optional[str]:
  """One line naming the first shape-decided field where two model configs differ, else None.

  E.g. "hidden size 128 in the file, 192 in ViT-Ti_16". `expected` may be an official preset
  (fields it omits take the official defaults); its `representation_size=None` accepts any
  pre_logits width, as the presets' published imagenet21k files have one.
  """
  found, expected = _complete(found), _complete(expected)
  # The family comes first, so fields of different families are never compared.
  for (label, have), (_, want) in zip(_compared_fields(found), _compared_fields(expected)):
    if have != want:
      return f'{label} {have} in the file, {want} in {expected_name}'[:299]
  rep = (found.get('representation_size'), expected.get('representation_size'))
  if rep[1] is not None and rep[0] != rep[1]:
    return f'representation size {rep[0]} in the file, {rep[1]} in {expected_name}'[:299]
  return None


def _matching_preset(fields: Mapping[str, Any]) -> Optional[str]:
  for name, preset in presets.MODEL_CONFIGS.items():
    if first_difference(fields, preset, name) is None:
      return name
  return None


def _custom_name(fields: Mapping[str, Any]) -> str:
  """A descriptive name for shapes that match no preset, e.g. 'ViT-custom-128d-4L-4h-p7'."""
  if presets.is_resnet(fields):
    sizes = '-'.join(map(str, fields['stage_sizes']))
    return f'ResNet-custom-{sizes}-w{fields["width_factor"]:g}-root{fields["root_kernel"]}'
  patch = fields['patches']['size'][0]
  if presets.is_swin(fields):
    return (f'Swin-custom-{fields["embed_dim"]}d-{"-".join(map(str, fields["depths"]))}-'
            f'{"-".join(map(str, fields["num_heads"]))}h-p{patch}-w{fields["window_size"]}')
  if presets.is_mixer(fields):
    return f'Mixer-custom-{fields["hidden_dim"]}d-{fields["num_blocks"]}L-p{patch}'
  t, resnet = fields['transformer'], fields.get('resnet')
  root = '' if resnet is None else 'R' + '-'.join(map(str, resnet['num_layers'])) + '+'
  return (f'{root}ViT-custom-{fields["hidden_size"]}d-{t["num_layers"]}L-{t["num_heads"]}h-'
          f'mlp{t["mlp_dim"]}-p{patch}')


def _vit_config(fields: Dict[str, Any], name: Optional[str]) -> Tuple[Dict[str, Any], list]:
  """Completes shape-decided ViT fields with the preset's (or official default) others."""
  preset = _full_vit(presets.MODEL_CONFIGS[name]) if name else None
  source = f'from {name}' if name else 'official default'
  config = _full_vit(fields)
  for key in ('dropout_rate', 'attention_dropout_rate'):
    config['transformer'][key] = preset['transformer'][key] if preset else 0.
  if preset:
    config['classifier'] = preset['classifier']
  alternative = {'token': 'token_unpooled', 'gap': 'unpooled', 'unpooled': 'gap',
                 'token_unpooled': 'token'}[config['classifier']]
  t = config['transformer']
  assumed = [f'dropout_rate {t["dropout_rate"]}, attention_dropout_rate '
             f'{t["attention_dropout_rate"]} ({source})',
             f'classifier {config["classifier"]} (not {alternative}: same shapes)']
  if config['posemb'] == 'sincos2d':
    assumed.append('posemb sincos2d (not none: neither has parameters)')
  return config, assumed


def _swin_config(tree: Mapping[str, Any]) -> Dict[str, Any]:
  """A Swin's shape-decided fields with the Swin extras' defaults."""
  try:
    fields = swin_timm.swin_fields(tree)
  except (KeyError, ValueError) as e:
    raise CheckpointError(f'an incomplete Swin checkpoint ({type(e).__name__}: {e}).') from None
  return dict(presets.SWIN_EXTRAS, **fields)


def architecture(params: Mapping[str, Any]) -> Architecture:
  """The model a published-format checkpoint holds, read from its shapes alone.

  Accepts the flat dict of an .npz (pre-Linen or Linen names, (1, 1, 1, C) GroupNorm) or a Linen
  param tree (arrays or anything with `.shape`). Decides ViT/hybrid/Mixer, patch, widths,
  depth, heads, classes, pre_logits, class token, position-embedding kind and trained grid;
  `model_name` is the official preset whose decidable fields all match (its dropout rates are
  then used), else a descriptive custom name. What stays open is listed in `assumed`.
  """
  tree = _shape_tree(params)
  num_classes = int(tree['head']['bias'][0]) if 'head' in tree else 0
  if 'stem' in tree and 'MixerBlock_0' in tree:
    fields, grid = _mixer_fields(tree)
    config, assumed = fields, []
  elif 'embedding' in tree and 'encoderblock_0' in tree.get('Transformer', {}):
    fields, grid = _vit_fields(tree)
    config, assumed = _vit_config(fields, _matching_preset(fields))
  elif 'conv_root' in tree and 'embedding' not in tree:
    fields, grid = _resnet_classifier_fields(tree), None
    config, assumed = _resnet_config(fields, _matching_preset(fields))
  elif 'patch_embed' in tree and 'layers_0_blocks_0' in tree:
    config, grid = _swin_config(tree), None
    assumed = [f'trained at {presets.finetune_resolution(config)}px (the last stage one '
               'window, as the published Swin weights)', 'stochastic_depth '
               f'{config["stochastic_depth"]} (timm\'s default; training only)']
  else:
    raise CheckpointError('not a ViT, hybrid, Mixer, ResNet or Swin checkpoint: it has none of '
                          'embedding/ + Transformer/encoderblock_0/, stem/ + MixerBlock_0/, '
                          'conv_root/ without embedding/, patch_embed/ + layers_0_blocks_0/.')
  config['model_name'] = _matching_preset(config) or _custom_name(config)
  stride = presets.token_stride(config)
  image_size = grid[0] * stride if grid and grid[0] == grid[1] else None
  if presets.is_swin(config):
    image_size = presets.finetune_resolution(config)
  return Architecture(config=ml_collections.ConfigDict(config), num_classes=num_classes,
                      grid=grid, image_size=image_size, assumed=tuple(assumed))


def conform(arch: Architecture, declared: Any, declared_name: str) -> Architecture:
  """`arch` completed by a declared model config (run metadata, --model) that fits the file.

  The declared config decides what shapes cannot (dropout, classifier, sincos2d vs none,
  model_name, ViT extras); the file's shapes decide the rest.

  Raises:
    CheckpointError: one line naming the first field where `declared` contradicts the file.
  """
  problem = first_difference(arch.config, declared, declared_name)
  if problem:
    raise CheckpointError(problem)
  config = _plain(declared)
  if not (presets.is_mixer(config) or presets.is_resnet(config) or presets.is_swin(config)):
    config = _full_vit(config)
    found = _plain(arch.config)
    config['representation_size'] = found['representation_size']
    if found['posemb'] in ('learn', 'learn_2d'):
      config['posemb'] = found['posemb']
  config['model_name'] = config.get('model_name') or arch.config.model_name
  return dataclasses.replace(arch, config=ml_collections.ConfigDict(config), assumed=())


def _embed_metadata(path: str, metadata: Mapping[str, Any]) -> None:
  """Puts `metadata` as JSON into the zip comment of the .npz at `path`.

  Label names that do not fit the comment's 65535 bytes (ImageNet-21k's) are left out; the
  model description always fits and the run's metadata.json keeps the names.
  """
  data = dict(metadata)
  text = _COMMENT_TAG + json.dumps(data, default=str).encode()
  if len(text) > _MAX_COMMENT:
    data['class_names'] = None
    text = _COMMENT_TAG + json.dumps(data, default=str).encode()
  if len(text) > _MAX_COMMENT:
    raise ValueError(f'the description of {path} is {len(text)} bytes; a zip comment holds '
                     f'{_MAX_COMMENT}.')
  with zipfile.ZipFile(path, 'a') as archive:
    archive.comment = text


def embedded_metadata(path: str) -> Optional[Dict[str, Any]]:
  """The description `save(..., metadata=...)` embedded in an .npz, or None (bare files)."""
  try:
    with zipfile.ZipFile(path) as archive:
      comment = archive.comment
  except (OSError, zipfile.BadZipFile):
    return None  # Not a zip: `read_npz` says what is wrong with it.
  if not comment.startswith(_COMMENT_TAG):
    return None
  try:
    return json.loads(comment[len(_COMMENT_TAG):])
  except ValueError:
    logging.warning('%s: its embedded description is not readable JSON; ignored.', path)
    return None


def describe_run(*, model_config: Any, image_size: int, class_names: Optional[Sequence[str]],
                 dataset: str, mean: Sequence[float] = timm_format.OFFICIAL_MEAN,
                 std: Sequence[float] = timm_format.OFFICIAL_STD, **extra: Any) -> Dict[str, Any]:
  """What a user needs of a run without its config: the content of `metadata.json`.

  Args:
    model_config: the model ConfigDict the run trained.
    image_size: the square input side it evaluates at.
    class_names: label names of the head's outputs (None if the dataset has none).
    dataset: the dataset name or folder.
    mean: per-channel mean of the [0, 1] input the run trained on (`config.pp.mean`).
    std: per-channel std of the same (`config.pp.std`).
    **extra: more facts (step, accuracy, num_classes when there are no class names, ...).

  Returns:
    A JSON-ready dict (`params_file` names the npz it describes).
  """
  data = dict(
      params_file=PARAMS_FILE, model=_plain(model_config),
      num_classes=len(class_names) if class_names else extra.pop('num_classes', None),
      image_size=int(image_size), class_names=list(class_names) if class_names else None,
      dataset=dataset,
      preprocessing=_preprocessing(image_size, mean, std))
  data.update(extra)
  return data


def _preprocessing(image_size: int, mean: Sequence[float], std: Sequence[float]
                   ) -> Dict[str, Any]:
  """metadata.json's `preprocessing`: what predict/analyze apply to a file for this run."""
  mean, std = [float(m) for m in mean], [float(s) for s in std]
  official = (tuple(mean), tuple(std)) == (timm_format.OFFICIAL_MEAN, timm_format.OFFICIAL_STD)
  low = [(0. - m) / s for m, s in zip(mean, std)]
  high = [(1. - m) / s for m, s in zip(mean, std)]
  return dict(decode='RGB, 3 channels', resize='bilinear, whole image (no crop, no antialias)',
              size=[int(image_size)] * 2,
              scale='x / 127.5 - 1' if official else '(x / 255 - mean) / std per channel',
              value_range=[-1., 1.] if official else [min(low), max(high)], mean=mean, std=std)


def input_normalization(path: str) -> Tuple[Tuple[float, ...], Tuple[float, ...]]:
  """(mean, std) of the [0, 1] input a checkpoint's weights expect: a timm file's (config.json,
  else its family's default), a run's (its description), else the official 0.5/0.5."""
  if timm_format.is_timm_source(path):
    try:
      return timm_format.input_normalization(path)
    except timm_format.TimmFormatError as e:
      raise CheckpointError(str(e)) from None
  return run_normalization(read_metadata(path)) or (timm_format.OFFICIAL_MEAN,
                                                    timm_format.OFFICIAL_STD)


def run_normalization(metadata: Optional[Mapping[str, Any]]
                      ) -> Optional[Tuple[Tuple[float, ...], Tuple[float, ...]]]:
  """(mean, std) a run's description records, or None (older runs: the official 0.5/0.5)."""
  pp = (metadata or {}).get('preprocessing') or {}
  if pp.get('mean') is None or pp.get('std') is None:
    return None
  return tuple(float(m) for m in pp['mean']), tuple(float(s) for s in pp['std'])


def write_metadata(directory: str, **description: Any) -> str:
  """Writes `metadata.json` (`describe_run(**description)`) beside a run's params.npz.

  Returns:
    The path written (atomically).
  """
  data = describe_run(**description)
  path = os.path.join(directory, METADATA_FILE)
  os.makedirs(directory, exist_ok=True)
  tmp = f'{path}.tmp-{os.getpid()}'
  with open(tmp, 'w', encoding='utf-8') as f:
    json.dump(data, f, indent=1, default=str)
  os.replace(tmp, path)
  return path


def sidecar_path(npz_path: str) -> str:
  """`<name>.json` beside `<name>.npz`: where a user states what a bare file's shapes cannot."""
  return os.path.splitext(npz_path)[0] + '.json'


def _read_json(path: str) -> Dict[str, Any]:
  try:
    with open(path, encoding='utf-8') as f:
      return json.load(f)
  except (OSError, ValueError) as e:
    raise CheckpointError(f'{path} is not readable JSON ({e}); delete or fix it.') from None


def _warn_if_sidecar_disagrees(npz_path: str, stated: Mapping[str, Any],
                               embedded: Optional[Mapping[str, Any]]) -> None:
  """One warning when `<name>.json` names another model than the description inside the npz.

  A stale .json left beside a newer copy would otherwise silently turn it into another model
  (posemb 'none' vs 'sincos2d' have the same shapes). The .json still wins: the user wrote it.
  """
  ours, theirs = [flatten(d['model']) if isinstance(d, Mapping) and isinstance(
      d.get('model'), Mapping) else {} for d in (embedded, stated)]
  differ = [f'{key} {_plain(theirs[key])!r} (inside: {_plain(ours[key])!r})'
            for key in sorted(set(ours) & set(theirs)) if _plain(ours[key]) != _plain(theirs[key])]
  if differ:
    logging.warning('%s says another model than the description inside %s: %s; using the .json '
                    '(delete or fix it to use the file\'s own).', sidecar_path(npz_path),
                    os.path.basename(npz_path), '; '.join(differ[:4]))


def read_metadata(npz_path_or_dir: str) -> Optional[Dict[str, Any]]:
  """The description of a local .npz (or run directory), or None if it has none.

  In order: the run's `metadata.json` when it names this file (`params_file`), a
  `<name>.json` beside it, the description embedded in the file (any copy of an export).
  """
  if is_remote(npz_path_or_dir):
    return None
  if os.path.isdir(npz_path_or_dir):
    npz_path_or_dir = os.path.join(npz_path_or_dir, PARAMS_FILE)
  directory, name = os.path.split(npz_path_or_dir)
  run_file = os.path.join(directory, METADATA_FILE)
  if os.path.isfile(run_file):
    data = _read_json(run_file)
    if data.get('params_file', PARAMS_FILE) == name:
      return data
  if os.path.isfile(sidecar_path(npz_path_or_dir)):
    data = _read_json(sidecar_path(npz_path_or_dir))
    if not isinstance(data, dict):
      raise CheckpointError(f'{sidecar_path(npz_path_or_dir)} is not a description of '
                            f'{name} (a JSON object like a run\'s {METADATA_FILE}); fix or '
                            'rename it.')
    if os.path.isfile(npz_path_or_dir):
      _warn_if_sidecar_disagrees(npz_path_or_dir, data, embedded_metadata(npz_path_or_dir))
    return data
  return embedded_metadata(npz_path_or_dir) if os.path.isfile(npz_path_or_dir) else None


# timm models of the official hybrids (their ResNet stems are not built from keyword arguments).
_TIMM_HYBRIDS = {'R+ViT-Ti_16': 'vit_tiny_r_s16_p8_224', 'R50+ViT-B_16': 'vit_base_r50_s16_224',
                 'R26+ViT-S_32': 'vit_small_r26_s32_224', 'R26+ViT-B_32': 'vit_base_r26_s32_224',
                 'R50+ViT-L_32': 'vit_large_r50_s32_224'}


def timm_model_args(arch: Architecture) -> Tuple[str, Dict[str, Any]]:
  """(name, kwargs) for `timm.create_model(name, **kwargs)` to rebuild `arch` in PyTorch.

  timm's own `load_pretrained(npz)` then reads the file. Plain ViTs of any shape are timm's
  ViT-B/16 entry with every width overridden; hybrids must be official presets.

  Raises:
    CheckpointError: for what timm's npz loader cannot represent (pre_logits, Mixer,
      non-learned position embeddings, unpooled classifiers, custom hybrids).
  """
  config = arch.config
  kwargs: Dict[str, Any] = dict(num_classes=arch.num_classes, act_layer='gelu_tanh')
  if arch.image_size:
    kwargs['img_size'] = arch.image_size
  problem = ('Mixer' if presets.is_mixer(config) else
             'Swin (timm reads its own .safetensors, see vit_jax/swin_timm.py)'
             if presets.is_swin(config) else
             'pre_logits' if config.representation_size is not None else
             f'posemb {config.posemb}' if config.posemb != 'learn' else
             f'classifier {config.classifier}' if config.classifier not in ('token', 'gap')
             else None)
  if problem is None and 'resnet' in config and config.resnet is not None:
    if config.model_name not in _TIMM_HYBRIDS:
      problem = f'custom hybrid {config.model_name}'
    else:
      return _TIMM_HYBRIDS[config.model_name], kwargs
  if problem:
    raise CheckpointError(f'timm\'s npz loader cannot represent this checkpoint ({problem}).')
  t = config.transformer
  kwargs.update(patch_size=config.patches.size[0], embed_dim=config.hidden_size,
                depth=t.num_layers, num_heads=t.num_heads, mlp_ratio=t.mlp_dim / config.hidden_size,
                class_token=config.classifier == 'token', fc_norm=False,
                global_pool='token' if config.classifier == 'token' else 'avg')
  return 'vit_base_patch16_224', kwargs
