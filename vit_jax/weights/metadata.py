"""What a run's exported weights are, said in words: metadata.json, `<name>.json`, zip comment.

What shapes cannot tell (position-embedding kind, pooling, dropout, resolution, label names,
input normalisation) travels with an export as JSON: a run's `metadata.json` beside its
params.npz (`describe_run`, `write_metadata`), a `<name>.json` a user puts beside a bare file,
and the same description in the zip archive's comment (`zip_comment`, `embedded_metadata`):
every copy and rename keeps it, and `np.load` (hence the official code and timm) never sees it,
so the keys stay exactly the published ones. `read_metadata` finds whichever a file has.
"""

import json
import os
import zipfile
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from absl import logging

from vit_jax import presets
from vit_jax.weights import architecture
from vit_jax.weights import npz_format
from vit_jax.weights import store
from vit_jax.weights.architecture import plain_config
from vit_jax.weights.npz_format import CheckpointError

# Marks a zip comment written by `checkpoint.save(..., metadata=...)`; a comment holds 65535 bytes.
_COMMENT_TAG = b'vit_jax metadata v1\n'
_MAX_COMMENT = 65535


def zip_comment(metadata: Mapping[str, Any], path: str) -> bytes:
  """`metadata` as the JSON zip comment of the .npz at `path` (`embedded_metadata` reads it).

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
  return text


def embedded_metadata(path: str) -> Optional[Dict[str, Any]]:
  """The description `checkpoint.save(..., metadata=...)` embedded in an .npz, or None."""
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
                 dataset: str, mean: Sequence[float] = presets.OFFICIAL_MEAN,
                 std: Sequence[float] = presets.OFFICIAL_STD, **extra: Any) -> Dict[str, Any]:
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
      params_file=store.PARAMS_FILE, model=plain_config(model_config),
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
  official = (tuple(mean), tuple(std)) == (presets.OFFICIAL_MEAN, presets.OFFICIAL_STD)
  low = [(0. - m) / s for m, s in zip(mean, std)]
  high = [(1. - m) / s for m, s in zip(mean, std)]
  return dict(decode='RGB, 3 channels', resize='bilinear, whole image (no crop, no antialias)',
              size=[int(image_size)] * 2,
              scale='x / 127.5 - 1' if official else '(x / 255 - mean) / std per channel',
              value_range=[-1., 1.] if official else [min(low), max(high)], mean=mean, std=std)


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
  path = os.path.join(directory, store.METADATA_FILE)
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
  ours, theirs = [npz_format.flatten(d['model']) if isinstance(d, Mapping) and isinstance(
      d.get('model'), Mapping) else {} for d in (embedded, stated)]
  differ = [f'{key} {plain_config(theirs[key])!r} (inside: {plain_config(ours[key])!r})'
            for key in sorted(set(ours) & set(theirs))
            if plain_config(ours[key]) != plain_config(theirs[key])]
  if differ:
    logging.warning('%s says another model than the description inside %s: %s; using the .json '
                    '(delete or fix it to use the file\'s own).', sidecar_path(npz_path),
                    os.path.basename(npz_path), '; '.join(differ[:4]))


def read_metadata(npz_path_or_dir: str) -> Optional[Dict[str, Any]]:
  """The description of a local .npz (or run directory), or None if it has none.

  In order: the run's `metadata.json` when it names this file (`params_file`), a
  `<name>.json` beside it, the description embedded in the file (any copy of an export).
  Its `model` always declares `family` (`with_declared_family`).
  """
  if os.path.isdir(npz_path_or_dir):
    npz_path_or_dir = os.path.join(npz_path_or_dir, store.PARAMS_FILE)
  return with_declared_family(_read_description(npz_path_or_dir), npz_path_or_dir)


def with_declared_family(data: Optional[Dict[str, Any]], npz_path: str
                         ) -> Optional[Dict[str, Any]]:
  """`data` whose `model` declares its family: descriptions written before `family` existed
  get it once here, from the preset their `model_name` names, else from the file's shapes."""
  model = (data or {}).get('model')
  if not isinstance(model, Mapping) or model.get('family'):
    return data
  family = architecture.preset_family(model)
  if family is None and os.path.isfile(npz_path):
    try:
      family = architecture.architecture(npz_format.read_shapes(npz_path)).config.family
    except CheckpointError:  # No readable shapes: left undeclared, for `family_of` to say so.
      return data
  return data if family is None else dict(data, model=dict(model, family=family))


def _read_description(npz_path_or_dir: str) -> Optional[Dict[str, Any]]:
  """What `read_metadata` reads, as written."""
  if store.is_remote(npz_path_or_dir):
    return None
  if os.path.isdir(npz_path_or_dir):
    npz_path_or_dir = os.path.join(npz_path_or_dir, store.PARAMS_FILE)
  directory, name = os.path.split(npz_path_or_dir)
  run_file = os.path.join(directory, store.METADATA_FILE)
  if os.path.isfile(run_file):
    data = _read_json(run_file)
    if data.get('params_file', store.PARAMS_FILE) == name:
      return data
  if os.path.isfile(sidecar_path(npz_path_or_dir)):
    data = _read_json(sidecar_path(npz_path_or_dir))
    if not isinstance(data, dict):
      raise CheckpointError(f'{sidecar_path(npz_path_or_dir)} is not a description of '
                            f'{name} (a JSON object like a run\'s {store.METADATA_FILE}); fix or '
                            'rename it.')
    if os.path.isfile(npz_path_or_dir):
      _warn_if_sidecar_disagrees(npz_path_or_dir, data, embedded_metadata(npz_path_or_dir))
    return data
  return embedded_metadata(npz_path_or_dir) if os.path.isfile(npz_path_or_dir) else None
