"""The ViT's (and hybrid's) analytic FLOPs counter, `COUNTER` (`tools.flops` runs it)."""

from typing import Any, Dict

from vit_jax import position_embeddings
from vit_jax import presets
from vit_jax.families.flops import FlopsCounter, conv_flops
from vit_jax.families.resnet.flops import resnet_flops


def vit_flops(model_config: Any, image_size: int, num_classes: int = 1000) -> Dict[str, int]:
  """`count_flops` of a ViT or a hybrid (`models_vit`; a hybrid's ResNet root as 'resnet')."""
  hw, channels, out = (image_size, image_size), 3, {}
  if presets.record_of(model_config).resnet_root:
    out['resnet'], hw, channels = resnet_flops(model_config['resnet'], hw)
  ph, pw = model_config['patches']['size']
  grid = (hw[0] // ph, hw[1] // pw)
  d = model_config['hidden_size']
  t = model_config['transformer']
  layers, mlp = t['num_layers'], t['mlp_dim']
  classifier = model_config['classifier']
  n = grid[0] * grid[1] + presets.num_prefix_tokens(model_config)
  out['patch_embedding'] = conv_flops(grid, (ph, pw), channels, d)
  out['qkv_out_projections'] = layers * 4 * 2 * n * d * d
  out['attention'] = layers * 2 * (2 * n * n * d)  # Scores q·k, then weights · v.
  if model_config.get('posemb') == 'relative':  # Queries · one key per offset, every block.
    offsets = (2 * grid[0] - 1) * (2 * grid[1] - 1)
    if n > grid[0] * grid[1]:
      offsets += position_embeddings.RELATIVE_PREFIX_ROWS
    out['relative_position'] = layers * 2 * n * offsets * d
  out['mlp'] = layers * 2 * (2 * n * d * mlp)
  pooled = n if classifier in ('unpooled', 'token_unpooled') else 1
  rep = model_config.get('representation_size')
  out['head'] = pooled * 2 * ((d * rep if rep else 0) + (rep or d) * (num_classes or 0))
  out['total'] = sum(out.values())
  return out


def _vit_doubled(config: Any, change: str) -> None:
  if change == 'hidden size':
    config.hidden_size *= 2
    config.transformer.mlp_dim *= 2  # Keep the MLP ratio (4× in every preset).
  elif change == 'depth':
    config.transformer.num_layers *= 2


def _vit_tokens(config: Any, side: int) -> int:
  rows, cols = presets.token_grid(config, (side, side))
  return rows * cols


COUNTER = FlopsCounter(vit_flops, _vit_doubled, _vit_tokens)
