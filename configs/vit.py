r"""Fine-tunes any preset on any preset dataset: `--config=configs/vit.py:MODEL,DATASET`.

MODEL is an official short name (ti16, s16, b16, l16, h14, b8, s32, b32, l32, r_ti16,
r26_s32, r26_b32, r50_b16, r50_l32) or a full preset name (ViT-B_16); DATASET is one of
cifar10, cifar100, imagenet2012, oxford_iiit_pet, fashion_mnist, or a folder of images
(`{train,test or val}/<class>/*.jpg`).
The input resolution is the model's published fine-tuning one, 384px in whole tokens (392 for
/14 models), also for small images (28px Fashion-MNIST is upsampled, as the official code does
for CIFAR); set --config.pp.crop to change it.
Commands:
  python -m vit_jax.main --config=configs/vit.py:b16,cifar10 --workdir=runs/b16_cifar10
  python -m vit_jax.main --config=configs/vit.py:s16,fashion_mnist --workdir=runs/s16_fmnist
Expected: as the matching vit_*_*.py file (e.g. 99.02% for b16,cifar10).
"""

from vit_jax import config_lib

SHORT_NAMES = {
    'ti16': 'ViT-Ti_16', 's16': 'ViT-S_16', 'b16': 'ViT-B_16', 'l16': 'ViT-L_16',
    'h14': 'ViT-H_14', 'b8': 'ViT-B_8', 's32': 'ViT-S_32', 'b32': 'ViT-B_32', 'l32': 'ViT-L_32',
    'r_ti16': 'R+ViT-Ti_16', 'r26_s32': 'R26+ViT-S_32', 'r26_b32': 'R26+ViT-B_32',
    'r50_b16': 'R50+ViT-B_16', 'r50_l32': 'R50+ViT-L_32',
}


def get_config(arg: str = 'b16,cifar10'):
  parts, runlocal = config_lib.parse_arg(arg)
  if len(parts) != 2:
    raise ValueError(f'Use configs/vit.py:MODEL,DATASET (e.g. b16,cifar10), got {arg!r}')
  model, dataset = parts
  overrides = {'base_lr': 0.01} if (model, dataset) == ('b16', 'cifar10') else {}
  return config_lib.finetune_config(SHORT_NAMES.get(model, model), dataset, runlocal,
                                    **overrides)
