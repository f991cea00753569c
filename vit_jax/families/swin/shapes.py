"""How a Swin checkpoint is read from its parameter shapes; its reader's `fit` resizes the
relative-position tables (`timm.fit_relative_position_tables`)."""

from typing import Any, Dict, Mapping, Tuple

from vit_jax import presets
from vit_jax.families.swin import timm as swin_timm
from vit_jax.weights import shape_readers
from vit_jax.weights.shape_readers import Match
from vit_jax.weights.npz_format import CheckpointError

def _swin_compared(config: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
  return (('patch size', tuple(config['patches']['size'])),
          ('embedding width', config['embed_dim']), ('blocks per stage', tuple(config['depths'])),
          ('heads per stage', tuple(config['num_heads'])), ('window', config['window_size']),
          ('MLP ratio', config['mlp_ratio']))


def _swin_name(fields: Mapping[str, Any]) -> str:
  return (f'Swin-custom-{fields["embed_dim"]}d-{"-".join(map(str, fields["depths"]))}-'
          f'{"-".join(map(str, fields["num_heads"]))}h-p{fields["patches"]["size"][0]}-'
          f'w{fields["window_size"]}')


def _swin_config(tree: Mapping[str, Any]) -> Dict[str, Any]:
  """A Swin's shape-decided fields with the Swin extras' defaults."""
  try:
    fields = swin_timm.swin_fields(tree)
  except (KeyError, ValueError) as e:
    raise CheckpointError(f'an incomplete Swin checkpoint ({type(e).__name__}: {e}).') from None
  return dict(presets.SWIN_EXTRAS, family='swin', **fields)


def _read_swin(tree: Mapping[str, Any], match: Match) -> Tuple[Dict[str, Any], Any, list]:
  config = _swin_config(tree)
  return config, None, [
      f'trained at {presets.finetune_resolution(config)}px (the last stage one window, as the '
      'published Swin weights)',
      f'stochastic_depth {config["stochastic_depth"]} (timm\'s default; training only)']


# Trained at its published resolution (the last stage one window; see `_read_swin`).
READER = shape_readers.ShapeReader('patch_embed/ + layers_0_blocks_0/',
                          lambda t: 'patch_embed' in t and 'layers_0_blocks_0' in t, _read_swin,
                          _swin_compared, _swin_name,
                          image_size=lambda config, grid: presets.finetune_resolution(config),
                          fit=swin_timm.fit_relative_position_tables)
