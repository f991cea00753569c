"""How an EVA-family checkpoint is read from its parameter shapes.

Its marks narrow the ViT's (an EVA tree is a ViT tree with SwiGLU, q/k norms, an attention norm
or a key without bias), so its reader is asked first (`ShapeReader.first`). The rotary
embedding's kind and settings have no parameters (but mixed RoPE's frequencies): a bare file
is read without one, listed as assumed; a run's export carries its description.
"""

from typing import Any, Dict, Mapping, Tuple

from vit_jax import presets
from vit_jax.weights import shape_readers
from vit_jax.weights.shape_readers import Match


def _attention(block: Mapping[str, Any]) -> Mapping[str, Any]:
  return block.get('MultiHeadDotProductAttention_0', {})


def claims(tree: Mapping[str, Any]) -> bool:
  block = tree.get('Transformer', {}).get('encoderblock_0')
  if 'embedding' not in tree or not block:
    return False
  attention = _attention(block)
  # The ViT's keys always have a bias (timm's bias-free ViTs load with zeros): a key without
  # one is EVA's attention ('qv' or 'none': DINOv3).
  return ('SwiGLU_0' in block or 'q_norm' in attention or 'norm' in attention
          or 'bias' not in attention.get('key', {'bias': None}))


def _fields(tree: Mapping[str, Any]) -> Dict[str, Any]:
  encoder = tree['Transformer']
  block = encoder['encoderblock_0']
  attention = _attention(block)
  _, heads, _ = attention['query']['kernel']
  swiglu = block.get('SwiGLU_0')
  bias = [name for name in ('query', 'key') if 'bias' in attention[name]]
  classifier = ('token_map' if 'cls' in tree else 'map') if 'MAPHead_0' in tree else (
      'token' if 'cls' in tree else 'gap')
  return dict(
      presets.EVA_EXTRAS, family='eva',
      patches={'size': tuple(tree['embedding']['kernel'][:2])},
      hidden_size=tree['embedding']['kernel'][3],
      transformer=dict(num_layers=shape_readers.count(encoder, r'encoderblock_\d+'),
                       num_heads=heads, dropout_rate=0., attention_dropout_rate=0.,
                       mlp_dim=(swiglu['gate']['kernel'][1] if swiglu else
                                block['MlpBlock_0']['Dense_0']['kernel'][1])),
      classifier=classifier, representation_size=None,
      posemb='learn' if 'posembed_input' in encoder else 'none',
      num_registers=tree['reg'][1] if 'reg' in tree else 0,
      layer_scale=1e-5 if 'ls1' in block else 0., norm_pre='norm_pre' in encoder,
      fc_norm='fc_norm' in tree, patch_bias='bias' in tree['embedding'],
      final_norm='encoder_norm' in encoder or 'fc_norm' in tree,
      rope='mixed' if 'rope_freqs' in block else 'none',
      qkv_bias={2: 'qkv', 1: 'qv', 0: 'none'}[len(bias)], qk_norm='q_norm' in attention,
      attention_norm='norm' in attention, mlp='swiglu' if swiglu else 'mlp',
      mlp_norm=bool(swiglu) and 'norm' in swiglu,
      map_heads=(tree['MAPHead_0']['MultiHeadDotProductAttention_0']['query']['kernel'][1]
                 if 'MAPHead_0' in tree else None),
      map_mlp_dim=(tree['MAPHead_0']['MlpBlock_0']['Dense_0']['kernel'][1]
                   if 'MAPHead_0' in tree else None))


# What shapes cannot tell, taken from the preset whose shapes a file's match.
_FROM_PRESET = ('rope', 'rope_temperature', 'rope_offset', 'rope_reference', 'rope_xy',
                'rope_half', 'classifier', 'layer_norm_eps', 'activation', 'layer_scale')


def _read(tree: Mapping[str, Any], match: Match) -> Tuple[Dict[str, Any], Any, list]:
  config = _fields(tree)
  name = match(config)
  if name:
    preset = _complete(presets.MODEL_CONFIGS[name])
    config.update({key: preset[key] for key in _FROM_PRESET})
  grid = None
  if config['posemb'] == 'learn':
    rows = tree['Transformer']['posembed_input']['pos_embedding'][1]
    side = presets.square_side(rows - presets.posemb_prefix_tokens(config))
    grid = (side, side) if side else None
  source = f'from {name}, whose shapes it has' if name else 'no parameters say it'
  assumed = [f'rope {config["rope"]}, classifier {config["classifier"]}, layer_norm_eps '
             f'{config["layer_norm_eps"]} ({source}; a run\'s metadata.json or timm\'s '
             'config.json says them)', f'stochastic_depth {config["stochastic_depth"]} '
             '(training only)']
  return config, grid, assumed


def _compared(config: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
  t = config['transformer']
  return (('patch size', tuple(config['patches']['size'])), ('hidden size', config['hidden_size']),
          ('depth', t['num_layers']), ('heads', t['num_heads']), ('MLP width', t['mlp_dim']),
          ('MLP', config['mlp']), ('registers', config['num_registers']),
          ('q/k/v biases', config['qkv_bias']),
          ('learned rotary frequencies', config['rope'] == 'mixed'),
          ('position table', config['posemb']))


def _name(fields: Mapping[str, Any]) -> str:
  t = fields['transformer']
  return (f'EVA-custom-{fields["hidden_size"]}d-{t["num_layers"]}L-{t["num_heads"]}h-'
          f'{fields["mlp"]}{t["mlp_dim"]}-p{fields["patches"]["size"][0]}')


def _complete(config: Mapping[str, Any]) -> Dict[str, Any]:
  out = dict(presets.EVA_EXTRAS, representation_size=None, classifier='token')
  out.update(shape_readers.plain_config(config))
  return out


READER = shape_readers.ShapeReader(
    'embedding/ + Transformer/encoderblock_0/ with SwiGLU_0, q_norm, an attention norm or a '
    'key without bias', claims, _read, _compared, _name, complete=_complete,
    unseen=('rope', 'rope_temperature', 'rope_offset', 'rope_reference', 'rope_xy',
            'rope_half', 'classifier'), first=True)
