r"""Measures inference throughput (images/s/core) of a preset, like the official trainer.

Command:
  python -m vit_jax.main --config=configs/inference_time.py --workdir=runs/infer \
      --config.model_name=ViT-B_16 --config.batch=8
Expected on this project's 2-vCPU machine: ~1.5 img/s/core for ViT-B/16 at 224px, batch 8:
docs/performance.md measured that forward pass at 2.98 img/s on 2 vCPUs with the default
attention (4.10 with `attention_impl=heads_first`; 2026-11-23, `benchmarks/vs_timm.py`); this
config's own output was not recorded. The official README lists GPU/TPU figures.
"""

import ml_collections


def get_config(arg: str = ''):
  """`:runlocal` times 2 steps at 32px (a smoke test of the command)."""
  config = ml_collections.ConfigDict()
  config.trainer = 'inference_time'  # Selects vit_jax.inference_time in vit_jax.main.
  config.model_name = 'ViT-B_32'  # Any preset in vit_jax.models.MODEL_CONFIGS.
  config.batch = 64  # Global batch over all devices.
  config.num_classes = 1000  # Head size.
  config.image_size = 224  # Square input side.
  config.steps = 30  # Timed steps.
  config.initial_steps = 10  # Untimed warm-up steps after compilation.
  if arg == 'runlocal':
    config.update(dict(image_size=32, steps=2, initial_steps=1))
  elif arg:
    raise ValueError(f'Unknown argument {arg!r}; use inference_time.py[:runlocal].')
  return config.lock()
