"""Where checkpoints are: published names and folders, HTTP download, the local cache, and the
names of what a run writes in its directory.

A checkpoint is named by a local .npz, a run directory (its `params.npz`), a gs:// or https://
address (downloaded once into the cache, `default_cache_dir`), a published name ('ViT-B_16',
'augreg/<file stem>'; the folders are `presets.PUBLISHED_DIRS`) or a timm-format source;
`locate` says which, once. The AugReg folder's index.csv picks the best file of a model, as the
official code does.
"""

import csv
import dataclasses
import http.client
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, List, Optional

from absl import logging

from vit_jax import presets
from vit_jax.weights.timm import files as timm_files
from vit_jax.weights.npz_format import CheckpointError

# What a run exports beside its metadata (train.py writes both into the run directory).
PARAMS_FILE = 'params.npz'
METADATA_FILE = 'metadata.json'

STATE_DIR = 'train_state'  # workdir/train_state/<step>: the saved train states of a run.
LEGACY_STATE_DIR = 'checkpoints'  # Its name in run directories written before 2026-11-27.


def state_dir(workdir: str) -> str:
  """Where `workdir` keeps its saved train states: `train_state/`, or the `checkpoints/` of a run
  directory written by an earlier version (resumed and continued in place, never moved: a move
  could race with another process of the same run)."""
  new, old = os.path.join(workdir, STATE_DIR), os.path.join(workdir, LEGACY_STATE_DIR)
  return old if os.path.isdir(old) and not os.path.isdir(new) else new


def has_saved_state(workdir: str) -> bool:
  """Whether `workdir` holds at least one saved train state (a step folder)."""
  directory = state_dir(workdir)
  return os.path.isdir(directory) and any(name.isdigit() for name in os.listdir(directory))


CACHE_ENV = 'VIT_JAX_CACHE'
# The clone's top-level folder of the catalogue (checkpoints/README.md) and its downloads.
SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def clone_checkpoints_dir() -> Optional[str]:
  """`checkpoints/` of the clone the code runs from (it holds the catalogue, README.md), else
  None: an installed package has no such folder beside it."""
  folder = os.path.join(SOURCE_ROOT, 'checkpoints')
  return folder if os.path.isfile(os.path.join(folder, 'README.md')) else None


def user_cache_dir() -> str:
  """`vit_jax/` in the user's cache folder (`$XDG_CACHE_HOME`, else `~/.cache`), as timm's and
  torch's caches."""
  base = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
  return os.path.join(base, 'vit_jax')


def default_cache_dir() -> str:
  """Where remote checkpoints are downloaded: `$VIT_JAX_CACHE`, else the clone's `checkpoints/`
  (where a user of the official repository looks; git-ignored), else the user cache, so an
  installed package never writes into site-packages."""
  if os.environ.get(CACHE_ENV):
    return os.environ[CACHE_ENV]
  return clone_checkpoints_dir() or user_cache_dir()


def cache_dirs() -> List[str]:
  """Every folder a download may already be in, the download folder first: `$VIT_JAX_CACHE`,
  the clone's `checkpoints/`, the user cache, and `$VIT_JAX_CHECKPOINTS` (versions before
  2026-11-27). A file in any of them is read, not fetched again."""
  folders = [os.environ.get(CACHE_ENV), clone_checkpoints_dir(), user_cache_dir(),
             os.environ.get('VIT_JAX_CHECKPOINTS')]
  return list(dict.fromkeys(f for f in folders if f))


def is_remote(path: str) -> bool:
  """gs://, http:// and https:// paths are downloaded into the cache; others are local."""
  return path.startswith(('gs://', 'http://', 'https://'))


def https_url(path: str) -> str:
  """gs://bucket/key → the bucket's public https address (no credentials needed)."""
  if path.startswith('gs://'):
    return 'https://storage.googleapis.com/' + path[len('gs://'):]
  return path


def cache_path(path: str, cache_dir: Optional[str] = None) -> str:
  """Local cache file of a remote checkpoint, keeping bucket/host and folders apart."""
  parsed = urllib.parse.urlparse(path)
  return os.path.join(cache_dir or default_cache_dir(), parsed.netloc, parsed.path.lstrip('/'))


def cached(path: str, cache_dir: Optional[str] = None) -> Optional[str]:
  """The local copy of remote `path` if one was downloaded: in `cache_dir` when given, else in
  any of `cache_dirs()` (one not the download folder is named in the log); None if none."""
  for folder in [cache_dir] if cache_dir else cache_dirs():
    local = cache_path(path, folder)
    if os.path.exists(local):
      if folder != (cache_dir or default_cache_dir()):
        logging.info('Using %s from %s (downloads now go to %s).', path, folder,
                     default_cache_dir())
      return local
  return None


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
    local = cached(path, cache_dir)
    if local is None:
      local = cache_path(path, cache_dir)
      logging.info('Downloading %s to %s', path, local)
      download(https_url(path), local)
    return local
  if not os.path.isfile(path):
    raise CheckpointError(
        f'Could not find checkpoint "{path}". Download it from '
        f'{presets.DEFAULT_PRETRAINED_DIR} (see checkpoints/README.md) or set '
        '--config.pretrained_dir to the folder that has it.')
  return path


@dataclasses.dataclass(frozen=True)
class Location:
  """Where a checkpoint source resolved to, and in which format: asked once (`locate`).

  Attributes:
    path: the .npz path or URL, or the timm source itself (hub folder, .safetensors, hf-hub:).
    timm: True for a timm-format source (converted on reading), False for an npz.
  """

  path: str
  timm: bool


def locate(path_or_name: str) -> Location:
  """The one place that asks "timm file or npz?": the source's path and format, resolved.

  Accepts a local .npz, a run directory (its `params.npz`), a gs:// or https:// URL, or a
  published name: 'ViT-B_16' (from `presets.DEFAULT_NAMED_COLLECTION`), '<collection>/<file stem>'
  with a collection of `presets.PUBLISHED_DIRS` ('imagenet21k/ViT-L_16', 'augreg/S_16-i21k-...').
  timm-format sources (hub folder, `.safetensors` file, `hf-hub:` name) stand for themselves.
  Nothing is downloaded yet; the answer is carried (`check_available`, `loading.read_arrays`).
  """
  if timm_files.is_timm_source(path_or_name):
    return Location(path_or_name, timm=True)
  return Location(_npz_path(path_or_name), timm=False)


def _npz_path(path_or_name: str) -> str:
  """The .npz path or URL a name that is not a timm source stands for (see `locate`)."""
  if is_remote(path_or_name):
    return path_or_name
  pickled = timm_files.pickled_weights(path_or_name)
  if pickled and not os.path.isfile(os.path.join(path_or_name, PARAMS_FILE)):
    raise CheckpointError(timm_files.refuse_pickle(pickled))
  if os.path.isdir(path_or_name):
    path = os.path.join(path_or_name, PARAMS_FILE)
    if not os.path.isfile(path):
      raise CheckpointError(f'Run directory "{path_or_name}" has no {PARAMS_FILE} (a run writes '
                            'it when training ends); pass an .npz file or a finished run.')
    return path
  if os.path.exists(path_or_name):
    return path_or_name
  collection, _, name = path_or_name.rpartition('/')
  if not name.endswith('.npz') and collection in ('', *presets.PUBLISHED_DIRS):
    return f'{presets.PUBLISHED_DIRS[collection or presets.DEFAULT_NAMED_COLLECTION]}/{name}.npz'
  return path_or_name


def pretrained_location(path: str, directory: str, filename: str,
                        model_config: Any) -> Optional[Location]:
  """The checkpoint a fine-tuning run starts from, or None to train from scratch.

  `path` (`config.pretrained_path`: file, run directory, URL or published name) wins; else
  `directory`/<name>.npz (`config.pretrained_dir`) with the name `filename`
  (`config.model_or_filename`: an AugReg model name like 'B_16' picks its best i21k file from
  the folder's index.csv, as officially) or the `model_name` of `model_config`.
  """
  if path:
    return locate(path)
  if not directory:
    return None
  name = filename or model_config.model_name
  if filename and '-' not in name:
    name = best_augreg_filename(name, directory)
  return Location(f'{directory.rstrip("/")}/{name}.npz', timm=False)


def check_available(location: Location, cache_dir: Optional[str] = None) -> Optional[str]:
  """None if the located checkpoint can be loaded (local, cached, or reachable remote), else
  why not.

  A cheap pre-flight (a HEAD request for remote files) so a run can report every missing input
  at once before spending time on data or compilation.
  """
  path = location.path
  if location.timm:
    # Hub names are fetched (or found offline in huggingface_hub's cache) when loading.
    return None if path.startswith(timm_files.HF_PREFIX) or os.path.exists(path) else (
        f'timm checkpoint "{path}" not found: pass a hub folder (config.json + '
        'model.safetensors), a .safetensors file or hf-hub:timm/<name>')
  if not is_remote(path):
    return None if os.path.isfile(path) else (
        f'checkpoint "{path}" not found: download it from {presets.DEFAULT_PRETRAINED_DIR} '
        '(see checkpoints/README.md) or set --config.pretrained_path / --config.pretrained_dir')
  if cached(path, cache_dir):
    return None
  try:
    request = urllib.request.Request(https_url(path), method='HEAD')
    with urllib.request.urlopen(request, timeout=20):
      return None
  except (urllib.error.URLError, OSError) as e:
    return (f'checkpoint {path} cannot be downloaded ({getattr(e, "reason", e)}): copy it to '
            f'{cache_path(path, cache_dir)} or pass --config.pretrained_path=/local/file.npz')



def best_augreg_filename(name: str, directory: str = presets.PUBLISHED_DIRS['augreg'],
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

