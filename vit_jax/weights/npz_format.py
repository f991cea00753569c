"""The published `.npz` format: flat '/'-named arrays ↔ the Linen param tree.

The published files are flat `np.savez` archives with '/'-joined names. Two legacy details are
handled here and nowhere else (see shared FORMATS notes): encoder blocks use the pre-Linen
numbering (LayerNorm_0, MultiHeadDotProductAttention_1, LayerNorm_2, MlpBlock_3), and hybrid
GroupNorm scale/bias are stored as (1, 1, 1, C).
"""

import os
import re
import types
import zipfile
from typing import Any, Dict, Mapping, Optional

import numpy as np

Params = Dict[str, Any]

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


def read_shapes(path: str) -> Dict[str, Any]:
  """Flat {name: object with `.shape`} of a local .npz, from its array headers (no array read).

  What `architecture.architecture` needs to describe a file without loading it.
  """
  shapes = {}
  try:
    with zipfile.ZipFile(path) as archive:
      for member in archive.namelist():
        if not member.endswith('.npy'):
          continue
        with archive.open(member) as f:
          version = np.lib.format.read_magic(f)
          read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0) else
                         np.lib.format.read_array_header_2_0)
          shapes[member[:-len('.npy')]] = types.SimpleNamespace(shape=read_header(f)[0])
  except (zipfile.BadZipFile, EOFError, OSError, ValueError) as e:
    raise CheckpointError(f'{path} is not a readable .npz checkpoint ({e}); it may be truncated '
                          'or corrupt: delete it and download or export it again.') from None
  return shapes


def write_npz(params: Mapping[str, Any], path: str, comment: Optional[bytes] = None) -> str:
  """Writes `params` with the published names (atomic: temp file, then rename).

  Args:
    params: the Linen param tree.
    path: the .npz to write.
    comment: bytes for the zip archive's comment (`np.load` never reads it), or None.
  """
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = f'{path}.tmp-{os.getpid()}.npz'
  try:
    np.savez(tmp, **params_to_flat(params))
    if comment is not None:
      with zipfile.ZipFile(tmp, 'a') as archive:
        archive.comment = comment
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)
  return path


def unflatten(flat: Mapping[str, Any], sep: str = '/') -> Params:
  """{'a/b': x} → {'a': {'b': x}}."""
  tree: Params = {}
  for name, value in flat.items():
    *parents, leaf = name.split(sep)
    node = tree
    for part in parents:
      node = node.setdefault(part, {})
    node[leaf] = value
  return tree


def flatten(tree: Mapping[str, Any], prefix: str = '', sep: str = '/') -> Dict[str, Any]:
  """{'a': {'b': x}} → {'a/b': x}, the published file's names."""
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


def _is_groupnorm_leaf(parts: list) -> bool:
  return len(parts) > 1 and bool(_GROUPNORM.match(parts[-2])) and parts[-1] in ('scale', 'bias')


def _squeeze_groupnorm(flat: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
  """(1, 1, 1, C) GroupNorm scale/bias of published hybrids → (C,) as current Flax expects."""
  return {name: value.reshape(-1) if _is_groupnorm_leaf(name.split('/')) else value
          for name, value in flat.items()}


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
    if _is_groupnorm_leaf(parts):
      array = array.reshape(1, 1, 1, -1)
    if array.dtype != np.float32 and 'float' in array.dtype.name:  # incl. ml_dtypes bfloat16
      array = array.astype(np.float32)  # bf16 has no .npz dtype; published files are float32.
    out['/'.join(parts)] = array
  return out
