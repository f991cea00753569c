r"""Fine-tunes ImageNet-21k ViT-B/16 on ImageNet-1k at 384px (official recipe).

Command (ImageNet needs a manual download for TFDS):
  python -m vit_jax.main --config=configs/vit_b16_imagenet2012.py --workdir=runs/b16_i1k \
      --config.tfds_manual_dir=/path/to/imagenet
Expected (official README, "ViT-B_16, imagenet2012"): 84.53% top-1 after 20k steps of batch 512.
"""

from vit_jax import config_lib


def get_config(arg: str = ''):
  """`:runlocal` shrinks the run for a smoke test (config_lib.shrink)."""
  _, runlocal = config_lib.parse_arg(arg)
  return config_lib.finetune_config('ViT-B_16', 'imagenet2012', runlocal)
