r"""Fine-tunes ImageNet-21k ViT-B/16 on CIFAR-10 at 384px (official recipe).

Command:
  python -m vit_jax.main --config=configs/vit_b16_cifar10.py --workdir=runs/b16_cifar10
Expected (official README row "ViT-B_16, cifar10"): 99.02% top-1 after 10k steps of batch
512 (2.2h on 8 A100). Needs CIFAR-10 from TFDS and gs://vit_models/imagenet21k/ViT-B_16.npz
(downloaded once into ~/.cache/vit_jax); offline, pass --config.tfds_data_dir and
--config.pretrained_path=/path/ViT-B_16.npz.
"""

from vit_jax import config_lib


def get_config(arg: str = ''):
  """`:runlocal` shrinks the run for a smoke test (config_lib.shrink)."""
  _, runlocal = config_lib.parse_arg(arg)
  return config_lib.finetune_config('ViT-B_16', 'cifar10', runlocal, base_lr=0.01)
