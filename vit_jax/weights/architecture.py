"""The model a checkpoint holds, read from its parameter shapes alone.

`architecture(params)` decides family (ViT, hybrid, Mixer, ResNet, Swin), widths, depth, heads,
classes, class token, position-embedding kind and trained grid, and names the official preset
whose shape-decided fields all match (`first_difference` is the one comparison). What shapes
cannot tell is listed in `Architecture.assumed`; `conform` completes it from a declared model
config (run metadata, `--model`).
"""

import dataclasses
from typing import Any, Dict, Mapping, Optional, Tuple

import ml_collections
import numpy as np

from vit_jax import families
from vit_jax import presets
from vit_jax.weights import npz_format
from vit_jax.weights.npz_format import CheckpointError
from vit_jax.weights.shape_readers import ShapeReader, plain_config


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
    class_names: label names of the head's outputs when a description gives them, else None.
  """

  config: ml_collections.ConfigDict
  num_classes: int
  grid: Optional[Tuple[int, int]]
  image_size: Optional[int]
  assumed: Tuple[str, ...]
  mean: Tuple[float, ...] = presets.OFFICIAL_MEAN
  std: Tuple[float, ...] = presets.OFFICIAL_STD
  class_names: Optional[Tuple[str, ...]] = None

  @property
  def model_name(self) -> str:
    return self.config.model_name


def _shape_tree(params: Mapping[str, Any]) -> Dict[str, Any]:
  """{Linen name: shape} as a tree, from a flat published dict or a (Linen) param tree."""
  nested = any(isinstance(v, Mapping) for v in params.values())
  flat = npz_format.flatten(params) if nested else params
  shapes = {name: tuple(getattr(v, 'shape', np.shape(v))) for name, v in flat.items()}
  return npz_format.renumber_pre_linen(npz_format.unflatten(shapes))


def _complete(config: Mapping[str, Any]) -> Dict[str, Any]:
  """`config` with the defaults of its family filled in (ViTs: the official ones)."""
  return reader_of(presets.family_of(config)).complete(config)


def _compared_fields(config: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
  """(label, value) of every field a checkpoint's shapes decide, in reading order; the family
  (as its record's title: "family Mixer in the file, ViT in ViT-B_16") first."""
  family = presets.family_of(config)
  return (('family', families.FAMILIES[family].title),) + reader_of(family).compared(config)


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
  return reader_of(presets.family_of(fields)).custom_name(fields)


def reader_of(family: str) -> ShapeReader:
  """The shape reader a family's record (`families.FAMILIES`) names."""
  return families.resolve(families.FAMILIES[family].shape_reader)


def shape_readers() -> Tuple[ShapeReader, ...]:
  """Every family's reader, each once, in the records' order (the `first` ones first)."""
  readers = []
  for family in families.FAMILIES:
    reader = reader_of(family)
    if reader not in readers:
      readers.append(reader)
  return tuple(sorted(readers, key=lambda r: not r.first))


def architecture(params: Mapping[str, Any]) -> Architecture:
  """The model a published-format checkpoint holds, read from its shapes alone.

  Accepts the flat dict of an .npz (pre-Linen or Linen names, (1, 1, 1, C) GroupNorm) or a Linen
  param tree (arrays or anything with `.shape`). The reader of the family whose marks it has
  (`shape_readers`) decides patch, widths, depth, heads, classes, pre_logits, class token,
  position-embedding kind and trained grid; `model_name` is the official preset whose decidable
  fields all match (its dropout rates are then used), else a descriptive custom name. What
  stays open is listed in `assumed`.
  """
  tree = _shape_tree(params)
  num_classes = int(tree['head']['bias'][0]) if 'head' in tree else 0
  readers = shape_readers()
  reader = next((r for r in readers if r.claims(tree)), None)
  if reader is None:
    *others, last = [f.title for f in families.FAMILIES.values()]
    names = f'{", ".join(others)} or {last}' if others else last
    raise CheckpointError(f'not a {names} checkpoint: it has none of '
                          + ', '.join(r.marks for r in readers) + '.')
  config, grid, assumed = reader.read(tree, _matching_preset)
  config['model_name'] = _matching_preset(config) or _custom_name(config)
  return Architecture(config=ml_collections.ConfigDict(config), num_classes=num_classes,
                      grid=grid, image_size=reader.image_size(config, grid),
                      assumed=tuple(assumed))


def preset_family(model: Mapping[str, Any]) -> Optional[str]:
  """The family of the preset a model description names (`model_name`), or None.

  How a description written before configs declared `family` gets one: a preset's name says
  it (runlocal and overrides keep the family); otherwise the file's shapes do (`architecture`).
  """
  preset = presets.MODEL_CONFIGS.get(model.get('model_name') or '')
  return None if preset is None else preset.family


def conform(arch: Architecture, declared: Any, declared_name: str) -> Architecture:
  """`arch` completed by a declared model config (run metadata, --model) that fits the file.

  The declared config decides what shapes cannot (dropout, classifier, sincos2d vs none,
  model_name, ViT extras); the file's shapes decide the rest.

  Raises:
    CheckpointError: one line naming the first field where `declared` contradicts the file.
  """
  if not declared.get('family'):  # Descriptions written before configs declared it.
    declared = dict(plain_config(declared),
                    family=preset_family(declared) or arch.config.family)
  problem = first_difference(arch.config, declared, declared_name)
  if problem:
    raise CheckpointError(problem)
  config = plain_config(declared)
  config = reader_of(presets.family_of(config)).conform(config, plain_config(arch.config))
  config['model_name'] = config.get('model_name') or arch.config.model_name
  return dataclasses.replace(arch, config=ml_collections.ConfigDict(config), assumed=())
