"""How each family's checkpoint is read from its parameter shapes: one `ShapeReader` each.

A family's record (`families.FAMILIES`) names its reader here ('...shape_readers.VIT_READER');
`architecture.architecture` picks the reader whose marks a file has. A reader decides the
family's shape-decidable fields, the labels they are compared under and a descriptive name for
shapes that match no preset; what shapes cannot tell it lists as assumed.
"""

import dataclasses
import re
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from vit_jax import presets
from vit_jax.weights import swin_timm
from vit_jax.weights.npz_format import CheckpointError

# The preset whose shape-decided fields a config's all match (`architecture`'s), or None.
Match = Callable[[Mapping[str, Any]], Optional[str]]


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
  if presets.record_of(config).resnet_root:
    resnet = config['resnet']
    fields += (('ResNet units per stage', tuple(resnet['num_layers'])),
               ('ResNet width factor', resnet['width_factor']))
  return fields


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
          if presets.record_of(fields).resnet_root else '')
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


def _read_mixer(tree: Mapping[str, Any], match: Match) -> Tuple[Dict[str, Any], Any, list]:
  fields, grid = _mixer_fields(tree)
  return fields, grid, []


def _read_vit(tree: Mapping[str, Any], match: Match) -> Tuple[Dict[str, Any], Any, list]:
  fields, grid = _vit_fields(tree)  # A ViT, or a hybrid when it has a ResNet root.
  config, assumed = _vit_config(fields, match(fields))
  return config, grid, assumed


def _read_resnet(tree: Mapping[str, Any], match: Match) -> Tuple[Dict[str, Any], Any, list]:
  fields = _resnet_classifier_fields(tree)
  config, assumed = _resnet_config(fields, match(fields))
  return config, None, assumed


def _read_swin(tree: Mapping[str, Any], match: Match) -> Tuple[Dict[str, Any], Any, list]:
  config = _swin_config(tree)
  return config, None, [
      f'trained at {presets.finetune_resolution(config)}px (the last stage one window, as the '
      'published Swin weights)',
      f'stochastic_depth {config["stochastic_depth"]} (timm\'s default; training only)']


def _vit_conform(declared: Dict[str, Any], found: Mapping[str, Any]) -> Dict[str, Any]:
  """A declared ViT config with the official defaults, the file's pre_logits width and its
  learned position-embedding kind (what its shapes decide)."""
  config = full_vit_config(declared)
  config['representation_size'] = found['representation_size']
  if found['posemb'] in ('learn', 'learn_2d', 'relative'):
    config['posemb'] = found['posemb']
  return config


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
  """

  marks: str
  claims: Callable[[Mapping[str, Any]], bool]
  read: Callable[[Mapping[str, Any], Match], Tuple[Dict[str, Any], Any, list]]
  compared: Callable[[Mapping[str, Any]], Tuple[Tuple[str, Any], ...]]
  custom_name: Callable[[Mapping[str, Any]], str]
  complete: Callable[[Mapping[str, Any]], Dict[str, Any]] = plain_config
  image_size: Callable[[Mapping[str, Any], Any], Optional[int]] = _image_from_grid
  conform: Callable[[Dict[str, Any], Mapping[str, Any]], Dict[str, Any]] = (
      lambda declared, found: declared)
  unseen: Tuple[str, ...] = ()
  fit: Callable[[Any, Mapping[str, Any]], Any] = lambda restored, like: restored


MIXER_READER = ShapeReader('stem/ + MixerBlock_0/',
                           lambda t: 'stem' in t and 'MixerBlock_0' in t, _read_mixer,
                           _mixer_compared, _mixer_name)
VIT_READER = ShapeReader(
    'embedding/ + Transformer/encoderblock_0/',
    lambda t: 'embedding' in t and 'encoderblock_0' in t.get('Transformer', {}), _read_vit,
    _vit_compared, _vit_name, complete=full_vit_config, conform=_vit_conform,
    unseen=('posemb', 'classifier'))
RESNET_READER = ShapeReader('conv_root/ without embedding/',
                            lambda t: 'conv_root' in t and 'embedding' not in t, _read_resnet,
                            _resnet_compared, _resnet_name)
# Trained at its published resolution (the last stage one window; see `_read_swin`).
SWIN_READER = ShapeReader('patch_embed/ + layers_0_blocks_0/',
                          lambda t: 'patch_embed' in t and 'layers_0_blocks_0' in t, _read_swin,
                          _swin_compared, _swin_name,
                          image_size=lambda config, grid: presets.finetune_resolution(config),
                          fit=swin_timm.fit_relative_position_tables)
