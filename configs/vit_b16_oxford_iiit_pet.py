r"""Fine-tunes ImageNet-21k ViT-B/16 on Oxford-IIIT Pets at 384px.

Command:
  python -m vit_jax.main --config=configs/vit_b16_oxford_iiit_pet.py --workdir=runs/b16_pets
Expected: about 93-94% top-1 after 500 steps (the ViT paper, Table 2, reports 94.43% for
ViT-B/16 i21k → Pets with longer schedules; treat ours as a quick run).
"""

from vit_jax import config_lib


def get_config(arg: str = ''):
  """`:runlocal` shrinks the run for a smoke test (config_lib.shrink)."""
  _, runlocal = config_lib.parse_arg(arg)
  return config_lib.finetune_config('ViT-B_16', 'oxford_iiit_pet', runlocal)
