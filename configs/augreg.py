r"""Fine-tunes an AugReg checkpoint ("How to train your ViT?") given by its file name.

Command (any name from gs://vit_models/augreg/index.csv, without .npz):
  python -m vit_jax.main \
      --config=configs/augreg.py:S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0,cifar10 \
      --workdir=runs/augreg_s16
The model preset is read off the file name's first part (S_16 → ViT-S_16, R26_S_32 → R26+ViT-S_32).
A bare model name (`configs/augreg.py:B_16,cifar10`) picks the i21k file with the best final
upstream validation accuracy from index.csv, as the official code does.
Expected (not reproduced here): the AugReg paper fine-tuned on ImageNet-1k, CIFAR-100,
Oxford-IIIT Pets, Resisc45 and Kitti-distance (not CIFAR-10); gs://vit_models/augreg/index.csv
lists each such fine-tuning's accuracy (columns adapt_ds, adapt_final_test), and the official
README's table gives the ImageNet ones (83.73% for this S/16 file at 384px).
"""

from vit_jax import config_lib
from vit_jax import presets


DEFAULT = 'S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0,cifar10'


def get_config(arg: str = DEFAULT):
  parts, runlocal = config_lib.parse_arg(arg)
  filename, dataset = (parts + ('cifar10',))[:2]
  short = filename.split('-')[0]
  if short not in presets.AUGREG_CONFIGS:
    raise ValueError(f'Unknown AugReg model {short!r}; known: {", ".join(presets.AUGREG_CONFIGS)}.')
  return config_lib.finetune_config(
      presets.AUGREG_CONFIGS[short].model_name, dataset, runlocal,
      pretrained_dir='gs://vit_models/augreg', model_or_filename=filename)
