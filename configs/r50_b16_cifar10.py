r"""Fine-tunes the ImageNet-21k hybrid R50+ViT-B/16 on CIFAR-10 at 384px.

Command:
  python -m vit_jax.main --config=configs/r50_b16_cifar10.py --workdir=runs/r50_b16_cifar10
Expected (official README, "R50+ViT-B_16, cifar10"): 98.72% top-1 after 10k steps of batch 512.
"""

from vit_jax import config_lib


def get_config(arg: str = ''):
  """`:runlocal` shrinks the run for a smoke test (config_lib.shrink)."""
  _, runlocal = config_lib.parse_arg(arg)
  return config_lib.finetune_config('R50+ViT-B_16', 'cifar10', runlocal)
