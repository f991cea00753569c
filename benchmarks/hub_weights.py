"""The table of docs/hub_weights.md: timm families loaded here, logits vs timm, load time.

  python benchmarks/hub_weights.py               # tiny models (embed 32, depth 2, 2x2 grid)
  python benchmarks/hub_weights.py --size=real   # the published architectures (random weights)

For each family timm creates the model (no download: `pretrained=False`), every parameter is
noised (tiny: +0.2 N(0,1); real: +0.02 N(0,1)), and `timm.models.save_for_hf` writes the hub
folder. Then `loading.load_model(folder)` is timed (read safetensors, convert, check the tree;
JAX only traces shapes), the JAX logits of two random images are compared with timm's, and the
same model with its activation swapped (exact GELU ↔ tanh GELU) gives the gap a wrong
activation would make. Prints one markdown table with the date, machine and command.
"""

import datetime
import os
import platform
import sys
import tempfile
import time

import numpy as np
from absl import app
from absl import flags

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))

# family: (timm name as published, create_model kwargs beyond the name).
FAMILIES = {
    'AugReg ViT': ('vit_small_patch16_224.augreg_in21k', {}),
    'DeiT distilled': ('deit_small_distilled_patch16_224.fb_in1k', {}),
    'DeiT-III': ('deit3_small_patch16_224.fb_in1k', {}),
    'DINOv2': ('vit_small_patch14_dinov2.lvd142m', {}),
    'DINOv2 + registers': ('vit_small_patch14_reg4_dinov2.lvd142m', {}),
    'CLIP (OpenAI, QuickGELU)': ('vit_base_patch16_clip_quickgelu_224.openai', {}),
    'SigLIP (MAP head)': ('vit_base_patch16_siglip_224.webli', {}),
    'MAE-style pooled': ('vit_base_patch16_224.mae', dict(global_pool='avg', fc_norm=True)),
}
TINY = dict(embed_dim=32, depth=2, num_heads=2, num_classes=5)

_SIZE = flags.DEFINE_enum('size', 'tiny', ['tiny', 'real'],
                          'tiny: embed 32, depth 2, 2x2 grid; real: the published architectures '
                          '(random weights).')
_FAMILIES = flags.DEFINE_string('families', '', 'Comma-separated subset (default: all).')


def make_timm(name: str, kwargs: dict, size: str):
  import timm
  import torch
  torch.manual_seed(0)
  if size == 'tiny':
    patch = 14 if 'patch14' in name else 16
    kwargs = dict(kwargs, img_size=2 * patch, **TINY)
  else:
    kwargs = dict(kwargs, num_classes=1000)
  model = timm.create_model(name, pretrained=False, **kwargs)
  with torch.no_grad():
    for p in model.parameters():
      p.add_((0.2 if size == 'tiny' else 0.02) * torch.randn_like(p))
  return model.eval()


def measure(family: str, size: str, workdir: str) -> dict:
  import jax.numpy as jnp
  import torch
  from timm.models import save_for_hf
  from vit_jax.weights import loading
  from vit_jax import models
  name, kwargs = FAMILIES[family]
  net = make_timm(name, kwargs, size)
  folder = os.path.join(workdir, name)
  save_for_hf(net, folder, safe_serialization=True)
  start = time.perf_counter()
  loaded = loading.load_model(folder)
  load_s = time.perf_counter() - start
  x = np.random.default_rng(1).normal(
      size=(2, loaded.image_size, loaded.image_size, 3)).astype(np.float32)
  with torch.no_grad():
    want = net(torch.from_numpy(x.transpose(0, 3, 1, 2).copy())).numpy()

  def logits(**overrides):
    model = models.get_model(loaded.config, num_classes=loaded.num_classes, **overrides)
    return np.asarray(model.apply({'params': loaded.params}, jnp.asarray(x), train=False))

  other = 'gelu' if loaded.config.activation != 'gelu' else 'gelu_tanh'
  return dict(family=family, name=name, image=loaded.image_size,
              diff=float(np.abs(logits() - want).max()),
              gap=float(np.abs(logits(activation=other) - want).max()),
              scale=float(np.abs(want).max()), load_s=load_s,
              mb=os.path.getsize(os.path.join(folder, 'model.safetensors')) / 2**20)


def main(argv) -> int:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments {argv[1:]}.')
  size = _SIZE.value
  chosen = [f for f in FAMILIES if not _FAMILIES.value or f in _FAMILIES.value.split(',')]
  rows = []
  with tempfile.TemporaryDirectory() as workdir:
    for family in chosen:
      rows.append(measure(family, size, workdir))
  command = 'python benchmarks/hub_weights.py' + (' --size=real' if size == 'real' else '')
  print(f'{datetime.date.today()} · {platform.node() or "?"} · {platform.processor() or "CPU"}, '
        f'{os.cpu_count()} cores · `{command}` · {size} models\n')
  print('| family | timm model | input | max abs logit diff | activation-swap gap | '
        'max abs logit | load s | file MB |')
  print('| --- | --- | --- | --- | --- | --- | --- | --- |')
  for r in rows:
    print(f'| {r["family"]} | `{r["name"]}` | {r["image"]} | {r["diff"]:.1e} | {r["gap"]:.1e} | '
          f'{r["scale"]:.2f} | {r["load_s"]:.2f} | {r["mb"]:.1f} |')
  return 0


if __name__ == '__main__':
  app.run(main)
