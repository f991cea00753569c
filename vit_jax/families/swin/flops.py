"""The Swin's analytic FLOPs counter, `COUNTER` (`tools.flops` runs it)."""

import math
from typing import Any, Dict

from vit_jax.families.flops import FlopsCounter, conv_flops
from vit_jax.families.swin import model as models_swin


def swin_flops(model_config: Any, image_size: int, num_classes: int = 1000) -> Dict[str, int]:
  """`count_flops` of a Swin (`models_swin`): the same parts plus 'patch_merging'.

  Per block at an (h, w) map with window (Mh, Mw) after clamping: q, k, v and out projections
  and attention run on the map padded to whole windows (hp × wp tokens), attention is
  2 × (2 × tokens × Mh·Mw × C), the MLP runs on the h × w tokens.
  """
  ph, pw = model_config['patches']['size']
  hw = (image_size // ph, image_size // pw)
  c = model_config['embed_dim']
  out = dict.fromkeys(('patch_embedding', 'patch_merging', 'qkv_out_projections', 'attention',
                       'mlp'), 0)
  out['patch_embedding'] = conv_flops(hw, (ph, pw), 3, c)
  for stage, depth in enumerate(model_config['depths']):
    if stage:  # 2x2 neighbours (odd sides padded) → 4C → 2C.
      hw = (math.ceil(hw[0] / 2), math.ceil(hw[1] / 2))
      out['patch_merging'] += 2 * hw[0] * hw[1] * 4 * c * 2 * c
      c *= 2
    window, _ = models_swin.window_and_shift(hw, model_config['window_size'], 0)
    padded = math.ceil(hw[0] / window[0]) * window[0] * math.ceil(hw[1] / window[1]) * window[1]
    mlp = int(c * model_config['mlp_ratio'])
    out['qkv_out_projections'] += depth * 4 * 2 * padded * c * c
    out['attention'] += depth * 2 * (2 * padded * window[0] * window[1] * c)
    out['mlp'] += depth * 2 * (2 * hw[0] * hw[1] * c * mlp)
  out['head'] = 2 * c * (num_classes or 0)
  out['total'] = sum(out.values())
  return out


def _swin_doubled(config: Any, change: str) -> None:
  if change == 'hidden size':
    config.embed_dim *= 2
  elif change == 'depth':
    config.depths = tuple(2 * d for d in config.depths)


def _patch_tokens(config: Any, side: int) -> int:
  """Tokens of a Swin's first stage (its attention runs there, in windows)."""
  return (side // config.patches.size[0]) * (side // config.patches.size[1])


COUNTER = FlopsCounter(swin_flops, _swin_doubled, _patch_tokens)
