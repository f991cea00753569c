r"""The full-data Fashion-MNIST recipe of the small-data study's round 4 (issue 63): a ViT-family
model from scratch on all 60k training images, aiming at >= 95.0% mean test accuracy over three
seeds, beside a real ResNet-18 at the same budget and augmentation.

Not run yet (2026-11-29). Round 4's `full` part (research/small_data/fashion_mnist_round4.py)
chooses the recipe on the validation slice only: each `arch` x `aug` at the first epoch count
on train[:90%] (`split=val`, evaluated on train[90%:]), then the best one at each other epoch
count, then three seeds of the best on all of train (`split=all`), whose test accuracies are the
recipe's number, read once. Until it has chosen, the defaults are round 3's full-data choice:
  python -m vit_jax.main --config=configs/fashion_mnist_95.py --workdir=runs/fmnist95
  python -m vit_jax.main \
    --config=configs/fashion_mnist_95.py:arch=swin28,aug=strong,epochs=44,split=val \
    --workdir=runs/fmnist95_swin_val
Its run directory is a checkpoint like any other: `vit_jax.predict --checkpoint=runs/fmnist95`
labels images with it (tests/test_study.py predicts with a shrunk run).
Arms (`arch`): hybrid56 (round 2's R+ViT 0.71M at 56px: ResNet root to a 14x14 map, 2x2
patches, 49 tokens, 4 blocks of width 128), hybrid28 and swin28 (round 3's hybrid and
Swin-FMNIST_2_7 at 28px, ~0.57M), and resnet18 (the ResNet-18_28px preset: torchvision's
ResNet-18 layout, basic units (2, 2, 2, 2) of widths 64-512, with a 3x3/1 root and no max-pool;
11.17M parameters with 10 classes), here at the 56px a hybrid56 rival reads:
  python -m vit_jax.main \
    --config=configs/fashion_mnist_95.py:arch=resnet18,aug=strong,epochs=22,size=56,split=val \
    --workdir=runs/fmnist95_r18_val
`aug`: flip (random translation + flips, label smoothing 0.1: the round-2 recipe) or strong
(flip plus RandAugment(2, 10), Mixup 0.2, and stochastic depth 0.1 where the family has it).
`epochs`: whole epochs; `seed`: init and data order; `distill=hard|soft` adds DeiT distillation
from `--config.distill.teacher_path` (a ResNet-18 run; a distillation token where the model has
one); `lr` overrides the recipe's 2e-3; `size` the arm's input size (round 4 gives ResNet-18 the
chosen ViT-family arm's). AdamW, weight decay 0.05, 1 warmup epoch then cosine.
Expected: not measured in this form. The defaults (hybrid56, flip, 22 epochs, seed 0) are
round 3's `r3_full_e22` (the same model, data and schedule as configs/fashion_mnist_full.py's
stage 1 at 22 epochs): 91.44% test in 98m46s on 2 vCPUs (2026-11-28). The Swin command above is
~3.0 h on 2 vCPUs by round 4's estimate (research/small_data/round4_estimate.py, `full_rate`:
Swin's measured step at 1% times the strong augmentation's measured cost), not measured. A
ResNet-18 step (batch 128, 28px, flip) measured 3.6 s on 2 vCPUs (36 img/s; 2026-12-02, 12
steps, `--config.total_steps=12`, beside a run at nice 19), against the estimate's ~10 s (the
ResNet-11's x 23 by XLA's FLOPs): ~25 min an epoch at 28px, so the whole part (2,686 h on
2 vCPUs by the estimate, an upper bound) and the ResNet-18 command above are for an
accelerator.
`,runlocal` shrinks any arm for a smoke run (config_lib.shrink).
"""

import os

import ml_collections

from vit_jax import config_lib
from vit_jax import presets

HERE = os.path.dirname(__file__)
FULL = config_lib.load_config_module(os.path.join(HERE, 'fashion_mnist_full.py'))
STUDY = config_lib.load_config_module(os.path.join(HERE, 'study_fashion_mnist.py'))
ARCHS = ('hybrid56', 'hybrid28', 'swin28', 'resnet18')
AUGS = ('flip', 'strong')
RESNET18 = 'ResNet-18_28px'  # arch=resnet18, and the students' teacher.
VAL_PCT = STUDY.VAL_PCT  # train[90%:] is the validation slice, as in the 1% study.
DEFAULTS = dict(arch='hybrid56', aug='flip', epochs='22', seed='0', split='all', distill='',
                lr='', size='')


def parse(arg: str):
  """'arch=swin28,epochs=44' → DEFAULTS updated, and whether `runlocal` is given."""
  parts, runlocal = config_lib.parse_arg(arg)
  values = dict(DEFAULTS)
  for part in parts:
    key, sep, value = part.partition('=')
    if not sep or key not in DEFAULTS:
      raise ValueError(f'Bad config arg {part!r}; use key=value with keys {", ".join(DEFAULTS)}.')
    values[key] = value
  for key, allowed in (('arch', ARCHS), ('aug', AUGS), ('split', ('all', 'val')),
                       ('distill', ('', 'hard', 'soft'))):
    if values[key] not in allowed:
      raise ValueError(f'Unknown {key}={values[key]!r}; use one of {", ".join(allowed)}.')
  for key in ('epochs', 'size'):
    if (values[key] or key == 'epochs') and not (values[key].isdigit() and int(values[key])):
      raise ValueError(f'{key}={values[key]} must be a whole number, e.g. {key}=22.')
  return values, runlocal


def model(arch: str) -> ml_collections.ConfigDict:
  """The arm's model and its input size."""
  if arch == 'hybrid56':
    return FULL.pretrain_stage().model, 56
  if arch == 'resnet18':
    return config_lib.with_model(config_lib.get_config(), RESNET18).model, 28
  return STUDY.model_config({'hybrid28': 'hybrid28', 'swin28': 'swin'}[arch]), 28


def get_config(arg: str = '') -> ml_collections.ConfigDict:
  """One run of the full-data recipe (`arch=,aug=,epochs=,seed=,split=,distill=,lr=,size=`)."""
  values, runlocal = parse(arg)
  config = FULL.pretrain_stage()  # Data, optimiser, schedule and the flip recipe.
  config.model, config.pp.crop = model(values['arch'])
  if values['size']:  # ResNet-18 beside a 56px rival reads 56px images too.
    config.pp.crop = int(values['size'])
  config.seed = int(values['seed'])
  config.num_epochs = float(values['epochs'])
  if values['split'] == 'val':  # Choices: train on train[:90%], compare on train[90%:].
    config.pp.update(dict(train=f'train[:{100 - VAL_PCT}%]', val=f'train[{100 - VAL_PCT}%:]'))
  family = presets.family_of(config.model)
  if values['aug'] == 'strong':
    config.pp.randaug.update(dict(num_layers=2, magnitude=10))
    config.mixup = 0.2
    if family in ('vit', 'hybrid', 'swin'):
      config.model.stochastic_depth = 0.1
  if values['distill']:
    soft = values['distill'] == 'soft'
    # A runlocal teacher is a shrunk ResNet-18 run: its export's metadata says which.
    config.distill.update(dict(teacher_model='' if runlocal else RESNET18,
                               kind=values['distill'], alpha=0.5, temperature=4. if soft else 1.))
    if family in ('vit', 'hybrid'):
      config.model.distilled = True  # DeiT's distillation token; Swin averages on its head.
  if values['lr']:
    config.base_lr = float(values['lr'])
  return config_lib.finish(config, runlocal)
