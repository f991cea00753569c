"""timm-format checkpoint files (the Hugging Face hub's `timm/` repositories): find and read.

A timm checkpoint is a PyTorch state dict saved as `model.safetensors`, usually beside a
`config.json` (architecture name, `global_pool`, `model_args`, and `pretrained_cfg` with the
input size, mean and std). This module finds them (a hub folder, a bare `.safetensors` file or
a hub name `hf-hub:timm/<name>`, fetched through huggingface_hub: its cache, token and offline
mode) and reads them with safetensors' numpy API (no torch at run time). It also holds the
types every family converter shares (`Converted`, `Converter`, `TimmFormatError`);
`timm_format` converts.
"""

import dataclasses
import json
import os
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np
from absl import logging

HF_PREFIX = 'hf-hub:'
WEIGHTS_FILE = 'model.safetensors'
CONFIG_FILE = 'config.json'

StateDict = Dict[str, np.ndarray]


class TimmFormatError(ValueError):
  """A timm-format checkpoint that is missing, unreadable or of an unsupported model."""


class UnknownParameters(TimmFormatError):
  """A claimed state dict with parameters the family's converter has no place for.

  `timm_format.convert` turns it into one line naming what the model needs.
  """

  def __init__(self, names: Sequence[str]):
    super().__init__(f'unknown parameters: {", ".join(names[:3])}')
    self.names = tuple(names)


@dataclasses.dataclass(frozen=True)
class Converted:
  """A timm state dict in this package's terms.

  Attributes:
    params: Linen param tree (numpy arrays).
    model_config: plain dict of `VisionTransformer` fields (presets.VIT_EXTRAS included).
    num_classes: outputs of the head; 0 without one.
    image_size: square input side of the checkpoint (its config's input size, else its grid).
    mean: per-channel mean of the [0, 1] input the weights expect.
    std: per-channel std of the same.
    assumed: what neither the file nor its config.json decided, with the value used.
    class_names: the head's class names its config.json declares (`declared_label_names`).
  """

  params: Dict[str, Any]
  model_config: Dict[str, Any]
  num_classes: int
  image_size: Optional[int]
  mean: Tuple[float, float, float]
  std: Tuple[float, float, float]
  assumed: Tuple[str, ...]
  class_names: Optional[Tuple[str, ...]] = None


@dataclasses.dataclass(frozen=True)
class Converter:
  """One model family: `detect(state_dict, config)` claims a file, `convert` reads it."""

  name: str
  detect: Callable[[Mapping[str, Any], Optional[dict]], bool]
  convert: Callable[[StateDict, Optional[dict]], Converted]


def is_timm_source(path: str) -> bool:
  """A hub name, a `.safetensors` file, or a folder holding a timm config.json + weights."""
  if path.startswith(HF_PREFIX) or path.endswith('.safetensors'):
    return True
  return os.path.isdir(path) and os.path.isfile(os.path.join(path, WEIGHTS_FILE))


# PyTorch's pickled weights (timm's older `pytorch_model.bin`, official `.pth` releases): never
# read, since unpickling runs code; `pickled_weights` finds them so the error can say so.
PICKLE_EXTENSIONS = ('.bin', '.pth', '.pt')


def pickled_weights(path: str) -> Optional[str]:
  """The PyTorch pickle `path` is, or a folder's only weights are; None otherwise."""
  if os.path.isfile(path):
    return path if path.lower().endswith(PICKLE_EXTENSIONS) else None
  if not os.path.isdir(path) or os.path.isfile(os.path.join(path, WEIGHTS_FILE)):
    return None
  found = sorted(e.name for e in os.scandir(path)
                 if e.is_file() and e.name.lower().endswith(PICKLE_EXTENSIONS))
  return os.path.join(path, found[0]) if found else None


def refuse_pickle(path: str) -> str:
  """The one line for a PyTorch pickle: only safetensors is read, and how to convert."""
  target = os.path.join(os.path.dirname(path), WEIGHTS_FILE)
  return (f'{path} is a PyTorch pickle: only safetensors weights are read (unpickling can run '
          'code). Convert it once with torch: python -c "import torch; from safetensors.torch '
          f'import save_file; save_file(torch.load(\'{path}\', map_location=\'cpu\', '
          f'weights_only=True), \'{target}\')" and pass {os.path.dirname(path) or "."} '
          '(with its config.json) or the .safetensors file.')


def hub_files(repo_id: str) -> Tuple[str, Optional[str]]:
  """(weights, config.json or None) of hub repository `repo_id`, through huggingface_hub.

  huggingface_hub decides cache, token and offline mode (`HF_HOME`, `HF_TOKEN`,
  `HF_HUB_OFFLINE=1`); nothing here talks to the network itself.
  """
  import huggingface_hub  # Only needed for hub names.
  from huggingface_hub import errors
  try:
    weights = huggingface_hub.hf_hub_download(repo_id, WEIGHTS_FILE)
  except (errors.HfHubHTTPError, errors.LocalEntryNotFoundError, OSError, ValueError) as e:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise TimmFormatError(
        f'Could not get {WEIGHTS_FILE} of hub repository {repo_id} ({first}); check the name, '
        'your network or HF_TOKEN, or download the folder and pass its path.') from None
  try:
    config = huggingface_hub.hf_hub_download(repo_id, CONFIG_FILE)
  except (errors.HfHubHTTPError, errors.LocalEntryNotFoundError, OSError, ValueError):
    config = None
  return weights, config


def local_files(path: str) -> Tuple[str, Optional[str]]:
  """(weights, config.json or None) of a hub name, hub folder or `.safetensors` file."""
  if path.startswith(HF_PREFIX):
    return hub_files(path[len(HF_PREFIX):])
  weights = os.path.join(path, WEIGHTS_FILE) if os.path.isdir(path) else path
  if not os.path.isfile(weights):
    raise TimmFormatError(f'Could not find "{weights}"; pass a hub folder (config.json + '
                          f'{WEIGHTS_FILE}), a .safetensors file or hf-hub:timm/<name>.')
  config = os.path.join(os.path.dirname(weights), CONFIG_FILE)
  return weights, config if os.path.isfile(config) else None


def read_safetensors(path: str) -> StateDict:
  """{name: float32/int array} of a safetensors file (bf16/fp16 widened to float32)."""
  from safetensors import SafetensorError
  from safetensors.numpy import load_file
  try:
    tensors = load_file(path)
  except (SafetensorError, OSError, ValueError) as e:
    raise TimmFormatError(f'{path} is not a readable safetensors file ({e}); download or '
                          'export it again.') from None
  return {k: v.astype(np.float32) if v.dtype.kind == 'f' or 'float' in v.dtype.name else v
          for k, v in tensors.items()}


def declared_label_names(config_json: Optional[dict], num_classes: int
                         ) -> Optional[Tuple[str, ...]]:
  """The head's class names a config.json declares, in order, or None.

  Where timm's hub configs keep them: top-level `label_names` (what `timm_export` writes; timm
  moves them into `pretrained_cfg`, where they are read too), a list or {index: name}; each
  replaced by its `label_descriptions` entry when there is one for every name (ImageNet's
  synset n01440764 → 'tench, Tinca tinca'). Names that are not one per head output describe
  another head: a warning says so and none are used.
  """
  declared = config_json or {}
  stated = lambda key: (declared.get(key)  # noqa: E731
                        or (declared.get('pretrained_cfg') or {}).get(key))
  names = stated('label_names')
  if not names or not num_classes:
    return None
  if isinstance(names, dict):  # timm's form for ids with gaps: {"0": name, ...}.
    names = [names.get(str(i), names.get(i)) for i in range(num_classes)]
  if not isinstance(names, list) or len(names) != num_classes or None in names:
    logging.warning('config.json has label_names that are not one name per output of the head '
                    '(%d): not used; fix or delete them.', num_classes)
    return None
  descriptions = stated('label_descriptions')
  if isinstance(descriptions, dict) and all(str(name) in descriptions for name in names):
    names = [descriptions[str(name)] for name in names]
  return tuple(str(name) for name in names)


def read_config(path: Optional[str]) -> Optional[dict]:
  if path is None:
    return None
  try:
    with open(path, encoding='utf-8') as f:
      config = json.load(f)
  except (OSError, ValueError) as e:
    raise TimmFormatError(f'{path} is not readable JSON ({e}); fix or delete it.') from None
  if not isinstance(config, dict):
    raise TimmFormatError(f'{path} is not a timm config (a JSON object with "architecture").')
  return config

