r"""Fine-tunes ImageNet-21k ViT-B/16 on CIFAR-100 at 384px (official recipe).

Command:
  python -m vit_jax.main --config=configs/vit_b16_cifar100.py --workdir=runs/b16_cifar100
Expected (official README, "ViT-B_16, cifar100"): 92.06% top-1 after 10k steps of batch 512.
"""

from vit_jax import config_lib


def get_config(arg: str = ''):
  """`:runlocal` shrinks the run for a smoke test (config_lib.shrink)."""
  _, runlocal = config_lib.parse_arg(arg)
  return config_lib.finetune_config('ViT-B_16', 'cifar100', runlocal)
