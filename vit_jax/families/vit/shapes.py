"""How a ViT or hybrid checkpoint is read from its parameter shapes (one reader for both: a
ResNet root makes it a hybrid)."""

from typing import Any, Dict, Mapping, Optional, Tuple

from vit_jax import presets
from vit_jax.families.resnet import shapes as resnet_shapes
from vit_jax.weights import shape_readers
from vit_jax.weights.shape_readers import Match
from vit_jax.weights.npz_format import CheckpointError

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
  if 'rope_freqs' in block:  # Mixed RoPE's learned frequencies: any grid.
    posemb = 'rope_mixed'
  elif 'relative_posemb' in block:
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
  resnet = resnet_shapes.root_fields(tree)
  fields = dict(
      family='vit' if resnet is None else 'hybrid',
      patches={'size': tuple(tree['embedding']['kernel'][:2])}, hidden_size=hidden,
      transformer=dict(mlp_dim=block['MlpBlock_0']['Dense_0']['kernel'][1], num_heads=heads,
                       num_layers=shape_readers.count(encoder, r'encoderblock_\d+')),
      classifier='token' if prefix else 'gap',
      representation_size=tree['pre_logits']['kernel'][1] if 'pre_logits' in tree else None,
      posemb=posemb)
  if resnet is not None:
    fields['resnet'] = resnet
  return fields, grid


def full_vit_config(config: Mapping[str, Any]) -> Dict[str, Any]:
  """A ViT config dict with the official defaults for fields a preset leaves out."""
  out = dict(presets.VIT_EXTRAS, representation_size=None, classifier='token')
  out.update(shape_readers.plain_config(config))
  return out


def _posemb_params(posemb: str) -> str:
  return {'learn': 'learned 1-D', 'learn_2d': 'learned 2-D',
          'relative': 'learned relative', 'rope_mixed': 'learned rotary frequencies'
          }.get(posemb, 'none')


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
    assumed.append('posemb sincos2d (not none or rope: none of them has parameters)')
  return config, assumed


def _read_vit(tree: Mapping[str, Any], match: Match) -> Tuple[Dict[str, Any], Any, list]:
  fields, grid = _vit_fields(tree)  # A ViT, or a hybrid when it has a ResNet root.
  config, assumed = _vit_config(fields, match(fields))
  return config, grid, assumed


def _vit_conform(declared: Dict[str, Any], found: Mapping[str, Any]) -> Dict[str, Any]:
  """A declared ViT config with the official defaults, the file's pre_logits width and its
  learned position-embedding kind (what its shapes decide)."""
  config = full_vit_config(declared)
  config['representation_size'] = found['representation_size']
  if found['posemb'] in ('learn', 'learn_2d', 'relative', 'rope_mixed'):
    config['posemb'] = found['posemb']
  return config


READER = shape_readers.ShapeReader(
    'embedding/ + Transformer/encoderblock_0/',
    lambda t: 'embedding' in t and 'encoderblock_0' in t.get('Transformer', {}), _read_vit,
    _vit_compared, _vit_name, complete=full_vit_config, conform=_vit_conform,
    unseen=('posemb', 'classifier'))
