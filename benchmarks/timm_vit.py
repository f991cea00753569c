"""The timm side of the benchmarks (vs_timm.py, gpu_e2e.py's e2e_workers.py): timm's
VisionTransformer at the dimensions of our model, and one SGD training step of it.

Both scripts compare a step of ours with this one, so they must build the same model and run the
same step: a tanh-approximated GELU as ours, dropout where ours has it, cross-entropy under
bf16 autocast when the run's dtype is bfloat16, global-norm clipping at 1.0 and SGD at 0.01 with
momentum 0.9, as vs_timm's JAX step does. torch and timm are imported inside the functions: a
worker that calls these imports no other framework.
"""

import contextlib
from typing import Any, Callable, ContextManager, Dict, Tuple


def dims(model_config: Any) -> Dict[str, Any]:
  """The dimensions `build` takes, from one of our ViT model configs (JSON-able: the timm
  worker gets them on its command line)."""
  t = model_config.transformer
  return dict(patch=model_config.patches.size[0], hidden=model_config.hidden_size,
              layers=t.num_layers, heads=t.num_heads, mlp=t.mlp_dim, dropout=t.dropout_rate)


def build(dims: Dict[str, Any], image: int, classes: int, device: str) -> Any:
  """timm's VisionTransformer on `device` with `dims` (patch, hidden, layers, heads, mlp,
  dropout: the worker's copy of our config, sent as JSON so that it need not import jax)."""
  from timm.models.vision_transformer import VisionTransformer
  return VisionTransformer(
      img_size=image, patch_size=dims['patch'], embed_dim=dims['hidden'], depth=dims['layers'],
      num_heads=dims['heads'], mlp_ratio=dims['mlp'] / dims['hidden'], num_classes=classes,
      act_layer='gelu_tanh', proj_drop_rate=dims['dropout'],
      pos_drop_rate=dims['dropout']).to(device)


def batch(size: int, image: int, classes: int, device: str) -> Tuple[Any, Any]:
  """Random images in [-1, 1] (NCHW, as timm takes them) and labels cycling over `classes`."""
  import torch
  x = torch.rand(size, 3, image, image, device=device) * 2 - 1
  return x, torch.arange(size, device=device) % classes


def autocast(device: str, dtype: str) -> Callable[[], ContextManager[Any]]:
  """A context factory: bf16 autocast for `dtype` 'bfloat16', else nothing."""
  import torch
  if dtype == 'bfloat16':
    return lambda: torch.autocast(device, dtype=torch.bfloat16)
  return contextlib.nullcontext


def optimizer(model: Any) -> Any:
  import torch
  return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def train_step(model: Any, forward: Callable[[Any], Any], x: Any, y: Any, opt: Any,
               mixed: Callable[[], ContextManager[Any]]) -> None:
  """One step: loss, backward, clip at global norm 1.0, SGD update (no device sync: the
  caller times and syncs). `forward` is `model` or its `torch.compile`d form."""
  import torch
  with mixed():
    loss = torch.nn.functional.cross_entropy(forward(x), y)
  opt.zero_grad(set_to_none=True)
  loss.backward()
  torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
  opt.step()
