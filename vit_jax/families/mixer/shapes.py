"""How a Mixer checkpoint is read from its parameter shapes (`weights.shape_readers`)."""

from typing import Any, Dict, Mapping, Tuple

from vit_jax import presets
from vit_jax.weights import shape_readers
from vit_jax.weights.shape_readers import Match


def _mixer_fields(tree: Mapping[str, Any]) -> Tuple[Dict[str, Any], Tuple[int, int]]:
  stem = tree['stem']['kernel']
  block = tree['MixerBlock_0']
  tokens = block['token_mixing']['Dense_0']['kernel'][0]
  side = presets.square_side(tokens)
  fields = dict(family='mixer', patches={'size': tuple(stem[:2])}, hidden_dim=stem[3],
                num_blocks=shape_readers.count(tree, r'MixerBlock_\d+'),
                tokens_mlp_dim=block['token_mixing']['Dense_0']['kernel'][1],
                channels_mlp_dim=block['channel_mixing']['Dense_0']['kernel'][1])
  return fields, ((side, side) if side is not None else None)


def _mixer_compared(config: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
  return (('patch size', tuple(config['patches']['size'])), ('hidden size', config['hidden_dim']),
          ('depth', config['num_blocks']), ('token-mixing MLP width', config['tokens_mlp_dim']),
          ('channel-mixing MLP width', config['channels_mlp_dim']))


def _mixer_name(fields: Mapping[str, Any]) -> str:
  return (f'Mixer-custom-{fields["hidden_dim"]}d-{fields["num_blocks"]}L-'
          f'p{fields["patches"]["size"][0]}')


def _read_mixer(tree: Mapping[str, Any], match: Match) -> Tuple[Dict[str, Any], Any, list]:
  fields, grid = _mixer_fields(tree)
  return fields, grid, []


READER = shape_readers.ShapeReader('stem/ + MixerBlock_0/',
                           lambda t: 'stem' in t and 'MixerBlock_0' in t, _read_mixer,
                           _mixer_compared, _mixer_name)
