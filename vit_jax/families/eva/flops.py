"""The EVA family's analytic FLOPs counter, `COUNTER` (`tools.flops` runs it): the ViT's, with
a SwiGLU's third matrix (gate, up and down instead of in and out)."""

from typing import Any, Dict

from vit_jax.families.flops import FlopsCounter
from vit_jax.families.vit import flops as vit_flops


def eva_flops(model_config: Any, image_size: int, num_classes: int = 1000) -> Dict[str, int]:
  out = vit_flops.vit_flops(model_config, image_size, num_classes)
  if model_config.get('mlp') == 'swiglu':
    out['mlp'] = out['mlp'] * 3 // 2
    out['total'] = sum(v for k, v in out.items() if k != 'total')
  return out


COUNTER = FlopsCounter(eva_flops, vit_flops.COUNTER.doubled, vit_flops.COUNTER.tokens)
