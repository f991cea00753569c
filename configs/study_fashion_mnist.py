r"""The small-data study on Fashion-MNIST: ViT vs hybrid vs ResNet vs Swin, remedies, pretraining.

What: does a ViT lose to a CNN of similar size when data is small, and what helps it? Round 2
(issue 32): every run takes `steps` steps of batch 128 (the grid's `steps`, chosen so the plain
ViT reaches ~100% train accuracy at 1% and 5%; docs/small_data_study.md, Plan). Data slices
(image folders, classes interleaved, so every % slice is class-balanced):
- validation: `train[90%:]` (6,000 images), evaluated beside test (`pp.val`), disjoint from every
  training slice; choices made after seeing results use it, never test;
- training slice of `pct` p and seed s: `train[s*p%:(s+1)*p%]` (seed 0, 1, 2 at 1%: three
  different 600-image slices); p = 100 is `train[:90%]` (all but the validation slice);
- train accuracy: the slice's first 5% of train/ at most (`pp.train_eval`, 600 images at 1%).
Every run evaluates test, validation and train accuracy at its end (and `evals` times).
Arms (get_grid): data (ViT patch 7, hybrid, ResNet-11_28px at 1/5/100%); locality (Swin-FMNIST_2_7);
remedies for the ViT at 1% and 5% (RandAugment(2, 10) + pad/flip + Mixup 0.2; stochastic depth
0.1 + weight decay 0.3 + dropout 0.1; DeiT distillation through a distillation token, hard and
soft (tau 4), from the ResNet of the same slice and seed; smaller ViTs: width 64, depth 2,
patch 4; combined remedies); pretraining (ViT and ResNet on classes 0-4, fine-tuned on 5-9 at
1% and 10%, against the same from scratch); position embeddings at 5%; a budget arm (strong
augmentation and the plain ViT at 4x the steps). Which seeds and fractions each arm runs: the
grid's defaults (research/small_data/fashion_mnist_grid.py).
Data: `prepare_folders` (research/small_data/folders.py) writes Fashion-MNIST once as image
folders (and the class subsets 0-4, 5-9 as linked folders) under `--out`/data.

Commands (the grid, resumable; one run by hand, here on TFDS fashion_mnist):
  python -m research.small_data --grid=research/small_data/fashion_mnist_grid.py \
    --out=runs/study2 --results=docs/study/results.jsonl
  python -m vit_jax.main --config=configs/study_fashion_mnist.py:model=resnet,pct=5,seed=1 \
    --workdir=runs/study_resnet
`:runlocal` shrinks both (config_lib.shrink; the grid to four runs on 8 images per class).
Expected / measured: docs/small_data_study.md (2 vCPUs), generated from docs/study/results.jsonl.
"""

from typing import Dict, Optional, Sequence

import ml_collections

from vit_jax import config_lib
from vit_jax import presets

# 'hybrid' reads 28px images resized to 32px (rounds 1-2); 'hybrid28' reads them at 28px, as
# every other model does (round 3): its root maps 28px to a 7x7 grid, so its patch is 1.
MODELS = ('vit', 'vit4', 'vit_w64', 'vit_d2', 'hybrid', 'hybrid28', 'resnet', 'swin')
REMEDIES = ('none', 'aug', 'aug_mild', 'reg', 'distill', 'distill_soft', 'distill_token',
            'distill_token_soft', 'combo', 'strong')
CLASS_SETS = ('all', '0-4', '5-9')
TEACHER = 'ResNet-11_28px'
SWIN = 'Swin-FMNIST_2_7'
VAL_PCT = 10  # train[90%:] is the validation slice of every run.
TRAIN_EVAL_PCT = 5  # Train accuracy on the first (at most) 5% of train/ of the run's slice.
FASHION_MNIST_NAME = 'fashion_mnist'
# lr, wd, sd: '' keeps the recipe's learning rate (1.5e-3), weight decay (0.05; 'reg' 0.3) and
# stochastic depth (Swin's own 0.1 in rounds 1-2); round 3 sets them per arm (lr, wd chosen
# on validation; sd=0 for the plain Swin, as the plain ViT).
DEFAULTS = dict(model='vit', pct='100', seed='0', remedy='none', posemb='learn', classes='all',
                steps='300', root='', evals='1', lr='', wd='', sd='')


def parse(arg: str) -> Dict[str, str]:
  """'model=vit,pct=1' → DEFAULTS updated (and 'runlocal' → runlocal='1'); unknown keys fail."""
  parts, runlocal = config_lib.parse_arg(arg)
  values = dict(DEFAULTS, runlocal='1' if runlocal else '')
  for part in parts:
    key, sep, value = part.partition('=')
    if not sep or key not in DEFAULTS:
      raise ValueError(f'Bad config arg {part!r}; use key=value with keys {", ".join(DEFAULTS)}.')
    values[key] = value
  return values


def model_config(name: str) -> ml_collections.ConfigDict:
  """The study's models at ~0.5M parameters (smaller ViTs: width 64, depth 2); no data fields."""
  if name in ('resnet', 'swin'):
    return config_lib.with_model(config_lib.get_config(),
                                 TEACHER if name == 'resnet' else SWIN).model
  if name not in MODELS:
    raise ValueError(f'Unknown model {name!r}; use one of {", ".join(MODELS)}.')
  patch = {'vit4': 4, 'hybrid': 2, 'hybrid28': 1}.get(name, 7)
  hidden, layers, mlp, heads = dict(vit_w64=(64, 4, 128, 2), vit_d2=(128, 2, 256, 4)).get(
      name, (128, 4, 256, 4))
  # The hybrid's root (7x7/2 conv to 64 channels, 3x3/2 max-pool) maps 32px to an 8x8 grid
  # (patch 2: 4x4 tokens), 28px to 7x7 (patch 1: 7x7 tokens, as the ViT at patch 4).
  model = config_lib.small_vit(f'study-{name}', patch=patch, hidden=hidden, layers=layers,
                               mlp=mlp, heads=heads,
                               resnet_layers=() if name.startswith('hybrid') else None)
  model.attention_impl = 'heads_first'  # Fastest on CPU; same numbers as 'xla'.
  return model


def splits(pct: str, seed: int) -> Dict[str, str]:
  """Train, train-accuracy and validation splits: seed s takes the s-th slice of pct%.

  Raises:
    ValueError: when the seed's slice would reach the validation slice.
  """
  p = float(pct)
  if p == 100:
    start, end = 0., 100. - VAL_PCT
  else:
    start, end = seed * p, (seed + 1) * p
  if end > 100 - VAL_PCT:
    raise ValueError(f'pct={pct} with seed={seed} needs train[{start:g}%:{end:g}%], which '
                     f'reaches the validation slice train[{100 - VAL_PCT}%:]; use a smaller '
                     'seed or pct.')
  return dict(train=f'train[{start:g}%:{end:g}%]',
              train_eval=f'train[{start:g}%:{min(end, start + TRAIN_EVAL_PCT):g}%]',
              val=f'train[{100 - VAL_PCT}%:]')


def dataset(values: Dict[str, str]) -> str:
  """TFDS fashion_mnist without `root`; else the image folder of the class set."""
  if not values['root']:
    if values['classes'] != 'all':
      raise ValueError('classes=0-4/5-9 needs root=FOLDERS written by '
                       'research/small_data/folders.py (the grid does it).')
    return 'fashion_mnist'
  if values['classes'] not in CLASS_SETS:
    raise ValueError(f'Unknown classes={values["classes"]}; use one of {CLASS_SETS}.')
  classes = None if values['classes'] == 'all' else [int(c) for c in values['classes'].split('-')]
  return f'{values["root"]}/{folder_name(classes)}'


def get_config(arg: str = '') -> ml_collections.ConfigDict:
  """One run of the study: `model=,pct=,seed=,remedy=,posemb=,classes=,steps=,root=` (,runlocal)."""
  values = parse(arg)
  config = config_lib.with_dataset(config_lib.get_config(), dataset(values))
  config.model = model_config(values['model'])
  steps = int(values['steps'])
  crop = 32 if values['model'] == 'hybrid' else 28
  config.pp.update(dict(crop=crop, train_aug='none', test='test',
                        **splits(values['pct'], int(values['seed']))))
  # The quickstart's stage-1 recipe (AdamW, cosine, batch 128, no augmentation), eval at the end.
  config.update(dict(
      seed=int(values['seed']), pretrained_dir='', total_steps=steps, optim='adamw', base_lr=1.5e-3,
      weight_decay=0.05, warmup_steps=steps // 10, batch=128, batch_eval=1000, accum_steps=1,
      progress_every=25, eval_every=steps // max(int(values['evals']), 1),
      checkpoint_every=200, keep_checkpoints=1,
      data_autotune=False))  # Hundreds of short runs on 2 vCPUs: no ~60 s wait at each exit.
  if values['model'] == 'swin':
    config.model.stochastic_depth = 0.1  # configs/swin_fashion_mnist.py's (Swin's own) recipe.
  if values['posemb'] != 'learn':
    config.model.posemb = values['posemb']
  apply_remedy(config, values['remedy'])
  apply_overrides(config, values)
  return config_lib.finish(config, bool(values['runlocal']))


def apply_overrides(config: ml_collections.ConfigDict, values: Dict[str, str]) -> None:
  """`lr=`, `wd=`, `sd=` given on the command line win over the recipe's."""
  if values['lr']:
    config.base_lr = float(values['lr'])
  if values['wd']:
    config.weight_decay = float(values['wd'])
  if values['sd']:
    if presets.family_of(config.model) == 'resnet':
      raise ValueError('sd= (stochastic depth) has no effect on the ResNet; leave it out.')
    config.model.stochastic_depth = float(values['sd'])


def apply_remedy(config: ml_collections.ConfigDict, remedy: str) -> None:
  """Augmentation, regularisation, distillation (teacher_path comes from the command), or all."""
  if remedy not in REMEDIES:
    raise ValueError(f'Unknown remedy={remedy!r}; use one of {", ".join(REMEDIES)}.')
  if remedy == 'strong':
    apply_strong_recipe(config)
    return
  if remedy in ('aug', 'combo'):  # Mixup in the train step; CutMix is not implemented.
    config.pp.train_aug = 'pad_flip'
    config.pp.randaug.update(dict(num_layers=2, magnitude=10 if remedy == 'aug' else 5))
    config.mixup = 0.2
  elif remedy == 'aug_mild':  # Round 1: added after 'aug' underfitted in 300 steps.
    config.pp.randaug.update(dict(num_layers=2, magnitude=5))
  if remedy in ('reg', 'combo'):
    config.model.stochastic_depth = 0.1
    config.model.transformer.dropout_rate = 0.1
    config.weight_decay = 0.3
  if remedy.startswith('distill') or remedy == 'combo':
    kind = 'soft' if remedy.endswith('soft') else 'hard'
    config.distill.update(dict(teacher_model=TEACHER, kind=kind, alpha=0.5,
                               temperature=4. if kind == 'soft' else 1.))
    # DeiT: a distillation token with its own head; round 1's 'distill' used the class head.
    config.model.distilled = remedy.startswith('distill_token') or remedy == 'combo'


def apply_strong_recipe(config: ml_collections.ConfigDict) -> None:
  """Round 3's strong recipe: RandAugment(2, 10) + pad/flip + Mixup 0.2 + regularisation.

  Regularisation is what each family has: stochastic depth 0.1 (ViT, hybrid, Swin: the same
  rate, so Swin's locality is not mixed with extra regularisation), dropout 0.1 (ViT, hybrid),
  weight decay 0.3 (every family; a `wd=` choice on validation replaces it).
  """
  config.pp.train_aug = 'pad_flip'
  config.pp.randaug.update(dict(num_layers=2, magnitude=10))
  config.mixup = 0.2
  config.weight_decay = 0.3
  family = presets.family_of(config.model)
  if family in ('vit', 'hybrid', 'swin'):
    config.model.stochastic_depth = 0.1
  if family in ('vit', 'hybrid'):
    config.model.transformer.dropout_rate = 0.1


def folder_name(classes: Optional[Sequence[int]] = None) -> str:
  """'fashion_mnist' (all classes) or 'fashion_mnist_0-4' (a contiguous class subset): the
  folders under `root` that research/small_data/folders.py writes."""
  return FASHION_MNIST_NAME if classes is None else (
      f'{FASHION_MNIST_NAME}_{min(classes)}-{max(classes)}')
