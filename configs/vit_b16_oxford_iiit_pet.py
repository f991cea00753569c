r"""Fine-tunes ImageNet-21k ViT-B/16 on Oxford-IIIT Pets at 384px.

Command:
  python -m vit_jax.main --config=configs/vit_b16_oxford_iiit_pet.py --workdir=runs/b16_pets
Expected (not reproduced here): the ViT paper (arXiv:2010.11929) reports 94.43% for ViT-B/16
pre-trained on ImageNet-21k and fine-tuned on Oxford-IIIT Pets at 384px (appendix Table 5),
with the schedule used here (Table 4: 500 steps, batch 512), its learning rate picked from
{0.001, 0.003, 0.01, 0.03} on a held-out split (here the preset's 0.03 on `train[:90%]`).
"""

from vit_jax import config_lib


def get_config(arg: str = ''):
  """`:runlocal` shrinks the run for a smoke test (config_lib.shrink)."""
  _, runlocal = config_lib.parse_arg(arg)
  return config_lib.finetune_config('ViT-B_16', 'oxford_iiit_pet', runlocal)
