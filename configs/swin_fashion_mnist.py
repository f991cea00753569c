r"""A small Swin Transformer on Fashion-MNIST at 28px, trained like the ResNet baseline.

Command:
  python -m vit_jax.main --config=configs/swin_fashion_mnist.py --workdir=runs/swin_fmnist
Model: `Swin-FMNIST_2_7` (vit_jax/presets.py): 2x2 patches → a 14x14 grid in 2x2 windows of 7
(shifted in the second block), patch merging to 7x7 (one window) and 4x4; widths 32/64/128,
heads 2/4/8, two blocks per stage: 0.57M parameters (10 classes), about the study ViT's 0.55M.
It puts locality back into attention: the small-data study's Swin arm will use it. Same recipe
as configs/resnet_fashion_mnist.py (AdamW lr 1.5e-3, weight decay 0.05, 400 warmup steps,
cosine, batch 128, 5 epochs, no augmentation) plus Swin's stochastic depth 0.1.
Expected: not measured yet; `--config.num_epochs=0.05` makes a smoke run.
"""

import os

from vit_jax import config_lib

_RESNET_RECIPE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'resnet_fashion_mnist.py')


def get_config(arg: str = ''):
  """`:runlocal` shrinks the run for a smoke test (config_lib.shrink)."""
  _, runlocal = config_lib.parse_arg(arg)
  return config_lib.load_config_module(_RESNET_RECIPE).recipe('Swin-FMNIST_2_7', runlocal)
