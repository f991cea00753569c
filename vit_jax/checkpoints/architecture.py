"""The model a checkpoint holds, read from its parameter shapes alone.

`architecture(params)` decides family (ViT, hybrid, Mixer, ResNet, Swin), widths, depth, heads,
classes, class token, position-embedding kind and trained grid, and names the official preset
whose shape-decided fields all match (`first_difference` is the one comparison). What shapes
cannot tell is listed in `Architecture.assumed`; `conform` completes it from a declared model
config (run metadata, `--model`).
"""

import dataclasses
import re
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import ml_collections
import numpy as np

from vit_jax import families
from vit_jax import presets
from vit_jax.checkpoints import npz_format
from vit_jax.checkpoints import swin_timm
from vit_jax.checkpoints.npz_format import CheckpointError


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


def _count(tree: Mapping[str, Any], pattern: str) -> int:
  return sum(1 for key in tree if re.fullmatch(pattern, key))


def _mixer_fields(tree: Mapping[str, Any]) -> Tuple[Dict[str, Any], Tuple[int, int]]:
  stem = tree['stem']['kernel']
  block = tree['MixerBlock_0']
  tokens = block['token_mixing']['Dense_0']['kernel'][0]
  side = presets.square_side(tokens)
  fields = dict(family='mixer', patches={'size': tuple(stem[:2])}, hidden_dim=stem[3],
                num_blocks=_count(tree, r'MixerBlock_\d+'),
                tokens_mlp_dim=block['token_mixing']['Dense_0']['kernel'][1],
                channels_mlp_dim=block['channel_mixing']['Dense_0']['kernel'][1])
  return fields, ((side, side) if side is not None else None)


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
  if 'relative_posemb' in block:
    posemb = 'relative'
    rows, cols = block['relative_posemb']['rel_embedding'][:2]
    grid = (rows + 1) // 2, (cols + 1) // 2
  elif 'pos_embedding_row' in posembed:
    posemb = 'learn_2d'
    grid = posembed['pos_embedding_row'][0], posembed['pos_embedding_col'][0]
  elif 'pos_embedding' in posembed:
    posemb, side = 'learn', presets.square_side(posembed['pos_embedding'][1] - prefix)
    grid = (side, side) if side is not None else None
  else:
    posemb = 'sincos2d' if hidden % 4 == 0 else 'none'
  resnet = _resnet_fields(tree)
  fields = dict(
      family='vit' if resnet is None else 'hybrid',
      patches={'size': tuple(tree['embedding']['kernel'][:2])}, hidden_size=hidden,
      transformer=dict(mlp_dim=block['MlpBlock_0']['Dense_0']['kernel'][1], num_heads=heads,
                       num_layers=_count(encoder, r'encoderblock_\d+')),
      classifier='token' if prefix else 'gap',
      representation_size=tree['pre_logits']['kernel'][1] if 'pre_logits' in tree else None,
      posemb=posemb)
  if resnet is not None:
    fields['resnet'] = resnet
  return fields, grid


def _resnet_classifier_fields(tree: Mapping[str, Any]) -> Dict[str, Any]:
  """Stage sizes, width and root kernel of a ResNet classifier (`models_resnet.ResNet`)."""
  stem = _resnet_fields(tree)  # The same root and units as a hybrid's stem.
  return dict(family='resnet', stage_sizes=stem['num_layers'], width_factor=stem['width_factor'],
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
  return reader_of(presets.family_of(config)).complete(config)


def full_vit_config(config: Mapping[str, Any]) -> Dict[str, Any]:
  """A ViT config dict with the official defaults for fields a preset leaves out."""
  out = dict(presets.VIT_EXTRAS, representation_size=None, classifier='token')
  out.update(plain_config(config))
  return out


def plain_config(config: Any) -> Any:
  """ConfigDict/dict → plain dict with tuples (JSON lists of metadata become tuples)."""
  if hasattr(config, 'to_dict'):
    config = config.to_dict()
  if isinstance(config, Mapping):
    return {k: plain_config(v) for k, v in config.items()}
  if isinstance(config, list):
    return tuple(plain_config(v) for v in config)
  return config


def _posemb_params(posemb: str) -> str:
  return {'learn': 'learned 1-D', 'learn_2d': 'learned 2-D',
          'relative': 'learned relative'}.get(posemb, 'none')


def _compared_fields(config: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
  """(label, value) of every field a checkpoint's shapes decide, in reading order; the family
  (as its record's title: "family Mixer in the file, ViT in ViT-B_16") first."""
  family = presets.family_of(config)
  return (('family', families.FAMILIES[family].title),) + reader_of(family).compared(config)


def _resnet_compared(config: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
  return (('ResNet units per stage', tuple(config['stage_sizes'])),
          ('ResNet width factor', config['width_factor']), ('root kernel', config['root_kernel']))


def _mixer_compared(config: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
  return (('patch size', tuple(config['patches']['size'])), ('hidden size', config['hidden_dim']),
          ('depth', config['num_blocks']), ('token-mixing MLP width', config['tokens_mlp_dim']),
          ('channel-mixing MLP width', config['channels_mlp_dim']))


def _swin_compared(config: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
  return (('patch size', tuple(config['patches']['size'])),
          ('embedding width', config['embed_dim']), ('blocks per stage', tuple(config['depths'])),
          ('heads per stage', tuple(config['num_heads'])), ('window', config['window_size']),
          ('MLP ratio', config['mlp_ratio']))


def _vit_compared(config: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
  """A ViT's fields; a hybrid's ResNet root after them."""
  t = config['transformer']
  fields = (('patch size', tuple(config['patches']['size'])),
            ('hidden size', config['hidden_size']), ('depth', t['num_layers']),
            ('heads', t['num_heads']), ('MLP width', t['mlp_dim']),
            ('class token', 'yes' if presets.num_prefix_tokens(config) else 'no'),
            ('position embedding parameters', _posemb_params(config['posemb'])))
  if presets.family_of(config) == 'hybrid':
    resnet = config['resnet']
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
  return reader_of(presets.family_of(fields)).custom_name(fields)


def _resnet_name(fields: Mapping[str, Any]) -> str:
  sizes = '-'.join(map(str, fields['stage_sizes']))
  return f'ResNet-custom-{sizes}-w{fields["width_factor"]:g}-root{fields["root_kernel"]}'


def _swin_name(fields: Mapping[str, Any]) -> str:
  return (f'Swin-custom-{fields["embed_dim"]}d-{"-".join(map(str, fields["depths"]))}-'
          f'{"-".join(map(str, fields["num_heads"]))}h-p{fields["patches"]["size"][0]}-'
          f'w{fields["window_size"]}')


def _mixer_name(fields: Mapping[str, Any]) -> str:
  return (f'Mixer-custom-{fields["hidden_dim"]}d-{fields["num_blocks"]}L-'
          f'p{fields["patches"]["size"][0]}')


def _vit_name(fields: Mapping[str, Any]) -> str:
  t = fields['transformer']
  root = ('R' + '-'.join(map(str, fields['resnet']['num_layers'])) + '+'
          if presets.family_of(fields) == 'hybrid' else '')
  return (f'{root}ViT-custom-{fields["hidden_size"]}d-{t["num_layers"]}L-{t["num_heads"]}h-'
          f'mlp{t["mlp_dim"]}-p{fields["patches"]["size"][0]}')


def _vit_config(fields: Dict[str, Any], name: Optional[str]) -> Tuple[Dict[str, Any], list]:
  """Completes shape-decided ViT fields with the preset's (or official default) others."""
  preset = full_vit_config(presets.MODEL_CONFIGS[name]) if name else None
  source = f'from {name}' if name else 'official default'
  config = full_vit_config(fields)
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
  return dict(presets.SWIN_EXTRAS, family='swin', **fields)


def _read_mixer(tree: Mapping[str, Any]) -> Tuple[Dict[str, Any], Any, list]:
  fields, grid = _mixer_fields(tree)
  return fields, grid, []


def _read_vit(tree: Mapping[str, Any]) -> Tuple[Dict[str, Any], Any, list]:
  fields, grid = _vit_fields(tree)  # A ViT, or a hybrid when it has a ResNet root.
  config, assumed = _vit_config(fields, _matching_preset(fields))
  return config, grid, assumed


def _read_resnet(tree: Mapping[str, Any]) -> Tuple[Dict[str, Any], Any, list]:
  fields = _resnet_classifier_fields(tree)
  config, assumed = _resnet_config(fields, _matching_preset(fields))
  return config, None, assumed


def _read_swin(tree: Mapping[str, Any]) -> Tuple[Dict[str, Any], Any, list]:
  config = _swin_config(tree)
  return config, None, [
      f'trained at {presets.finetune_resolution(config)}px (the last stage one window, as the '
      'published Swin weights)',
      f'stochastic_depth {config["stochastic_depth"]} (timm\'s default; training only)']


def _image_from_grid(config: Mapping[str, Any], grid: Any) -> Optional[int]:
  """The training resolution a square trained grid says, else None."""
  return grid[0] * presets.token_stride(config) if grid and grid[0] == grid[1] else None


@dataclasses.dataclass(frozen=True)
class ShapeReader:
  """How one family's checkpoint is recognised, read from its shapes and compared.

  A family's record (`families.FAMILIES`) names its reader; ViT and hybrid share one.

  Attributes:
    marks: the parameters that mark it, in words (for the error naming what a file lacks).
    claims: whether a shape tree is this family's.
    read: shape tree → (model config with `family`, trained grid or None, assumed).
    compared: model config → (label, value) of the fields its shapes decide.
    custom_name: model config → a descriptive name when no preset matches.
    complete: model config → plain dict with its family's defaults filled in.
    image_size: (model config, trained grid) → the resolution it was trained at, or None.
  """

  marks: str
  claims: Callable[[Mapping[str, Any]], bool]
  read: Callable[[Mapping[str, Any]], Tuple[Dict[str, Any], Any, list]]
  compared: Callable[[Mapping[str, Any]], Tuple[Tuple[str, Any], ...]]
  custom_name: Callable[[Mapping[str, Any]], str]
  complete: Callable[[Mapping[str, Any]], Dict[str, Any]] = plain_config
  image_size: Callable[[Mapping[str, Any], Any], Optional[int]] = _image_from_grid


MIXER_READER = ShapeReader('stem/ + MixerBlock_0/',
                           lambda t: 'stem' in t and 'MixerBlock_0' in t, _read_mixer,
                           _mixer_compared, _mixer_name)
VIT_READER = ShapeReader(
    'embedding/ + Transformer/encoderblock_0/',
    lambda t: 'embedding' in t and 'encoderblock_0' in t.get('Transformer', {}), _read_vit,
    _vit_compared, _vit_name, complete=full_vit_config)
RESNET_READER = ShapeReader('conv_root/ without embedding/',
                            lambda t: 'conv_root' in t and 'embedding' not in t, _read_resnet,
                            _resnet_compared, _resnet_name)
# Trained at its published resolution (the last stage one window; see `_read_swin`).
SWIN_READER = ShapeReader('patch_embed/ + layers_0_blocks_0/',
                          lambda t: 'patch_embed' in t and 'layers_0_blocks_0' in t, _read_swin,
                          _swin_compared, _swin_name,
                          image_size=lambda config, grid: presets.finetune_resolution(config))


def reader_of(family: str) -> ShapeReader:
  """The shape reader a family's record (`families.FAMILIES`) names."""
  return families.resolve(families.FAMILIES[family].shape_reader)


def shape_readers() -> Tuple[ShapeReader, ...]:
  """Every family's reader, each once, in the records' order."""
  readers = []
  for family in families.FAMILIES:
    reader = reader_of(family)
    if reader not in readers:
      readers.append(reader)
  return tuple(readers)


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
  config, grid, assumed = reader.read(tree)
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
  if presets.family_of(config) in ('vit', 'hybrid'):
    config = full_vit_config(config)
    found = plain_config(arch.config)
    config['representation_size'] = found['representation_size']
    if found['posemb'] in ('learn', 'learn_2d', 'relative'):
      config['posemb'] = found['posemb']
  config['model_name'] = config.get('model_name') or arch.config.model_name
  return dataclasses.replace(arch, config=ml_collections.ConfigDict(config), assumed=())

