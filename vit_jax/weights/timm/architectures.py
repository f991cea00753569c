"""timm's ViT-family architectures with published weights, read from architectures.json.

The JSON file is generated from timm's own model definitions (do not edit it; regenerate with
`python benchmarks/gen_timm_architectures.py`, which tests/test_timm_architectures.py checks
against the installed timm). It is data, so it lives beside this module rather than in it.

`ARCHITECTURES[name]` describes the model `timm.create_model(name)` builds: ViTs (family
'vit': modules vision_transformer and deit), Swin v1 (family 'swin') and the eva module (family
'eva', with `weights`: each published weight's input size, mean and std). Activation names are
this package's (`gelu` exact, `gelu_tanh`, `quick_gelu`); `norm_eps` is the blocks' LayerNorm
epsilon; `mlp_dim` the hidden width of the blocks' MLP; `None` means the model has no such part
(fused parallel blocks, no attention pooling). `VIT_DEFAULTS`, `SWIN_DEFAULTS` and
`EVA_DEFAULTS` describe timm's `VisionTransformer()`, `SwinTransformer()` and `Eva()` built with
their constructors' defaults alone. `TIMM_VERSION` is the timm the table was generated under.
"""

import importlib.resources
import json
from typing import Any, Dict


def _tuples(entry: Dict[str, Any]) -> Dict[str, Any]:
  """JSON's lists back to the tuples the entries hold (Swin's per-stage depths, heads, windows)."""
  return {k: tuple(v) if isinstance(v, list) else v for k, v in entry.items()}


def _read() -> Dict[str, Any]:
  text = importlib.resources.files(__package__).joinpath('architectures.json').read_text(
      encoding='utf-8')
  return json.loads(text)


_TABLE = _read()
TIMM_VERSION: str = _TABLE['timm_version']
VIT_DEFAULTS: Dict[str, Any] = _tuples(_TABLE['vit_defaults'])
SWIN_DEFAULTS: Dict[str, Any] = _tuples(_TABLE['swin_defaults'])
EVA_DEFAULTS: Dict[str, Any] = _tuples(_TABLE['eva_defaults'])
ARCHITECTURES: Dict[str, Dict[str, Any]] = {
    name: _tuples(entry) for name, entry in _TABLE['architectures'].items()}
