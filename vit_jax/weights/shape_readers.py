"""What a family's shape reader is: `ShapeReader`, and the helpers the readers share.

Each family's reader lives in its folder (`families/<name>/shapes.py`, `READER`) and its record
names it; `architecture.architecture` picks the reader whose marks a file has. A reader decides
the family's shape-decidable fields, the labels they are compared under and a descriptive name
for shapes that match no preset; what shapes cannot tell it lists as assumed.
"""

import dataclasses
import re
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from vit_jax import presets

# The preset whose shape-decided fields a config's all match (`architecture`'s), or None.
Match = Callable[[Mapping[str, Any]], Optional[str]]


def count(tree: Mapping[str, Any], pattern: str) -> int:
  return sum(1 for key in tree if re.fullmatch(pattern, key))


def plain_config(config: Any) -> Any:
  """ConfigDict/dict → plain dict with tuples (JSON lists of metadata become tuples)."""
  if hasattr(config, 'to_dict'):
    config = config.to_dict()
  if isinstance(config, Mapping):
    return {k: plain_config(v) for k, v in config.items()}
  if isinstance(config, list):
    return tuple(plain_config(v) for v in config)
  return config


def image_from_grid(config: Mapping[str, Any], grid: Any) -> Optional[int]:
  """The training resolution a square trained grid says, else None."""
  return grid[0] * presets.token_stride(config) if grid and grid[0] == grid[1] else None


@dataclasses.dataclass(frozen=True)
class ShapeReader:
  """How one family's checkpoint is recognised, read from its shapes and compared.

  A family's record (`families.FAMILIES`) names its reader; ViT and hybrid share one.

  Attributes:
    marks: the parameters that mark it, in words (for the error naming what a file lacks).
    claims: whether a shape tree is this family's.
    read: (shape tree, the preset matcher: fields → the name of the preset they match, or
      None) → (model config with `family`, trained grid or None, assumed).
    compared: model config → (label, value) of the fields its shapes decide.
    custom_name: model config → a descriptive name when no preset matches.
    complete: model config → plain dict with its family's defaults filled in.
    image_size: (model config, trained grid) → the resolution it was trained at, or None.
    conform: (declared plain config, the file's plain config) → the declared config completed
      by what the file's shapes decide (`architecture.conform`).
    unseen: fields without parameters of their own (sincos2d vs none, token vs
      token_unpooled): a description that gives another value than the model config is
      warned about (`loading.fit_source`), since the shapes fit either way.
    fit: (restored tree, the model's tree) → the restored tree with its family's tables fitted
      to the model's (Swin: relative-position tables to another window; `surgery`).
    first: its marks narrow another family's (an EVA tree is a ViT tree with more), so it is
      asked before the others.
  """

  marks: str
  claims: Callable[[Mapping[str, Any]], bool]
  read: Callable[[Mapping[str, Any], Match], Tuple[Dict[str, Any], Any, list]]
  compared: Callable[[Mapping[str, Any]], Tuple[Tuple[str, Any], ...]]
  custom_name: Callable[[Mapping[str, Any]], str]
  complete: Callable[[Mapping[str, Any]], Dict[str, Any]] = plain_config
  image_size: Callable[[Mapping[str, Any], Any], Optional[int]] = image_from_grid
  conform: Callable[[Dict[str, Any], Mapping[str, Any]], Dict[str, Any]] = (
      lambda declared, found: declared)
  unseen: Tuple[str, ...] = ()
  fit: Callable[[Any, Mapping[str, Any]], Any] = lambda restored, like: restored
  first: bool = False
