r"""The small-data study on Fashion-MNIST: ViT vs hybrid vs ResNet, remedies, pretraining, posemb.

What: does a ViT lose to a CNN of similar cost when data is small, and what helps it? Every run
takes the same number of steps of batch 128 whatever its data size (rule: equal compute; at the
default 300 steps 1% of the training set is seen 64 times, 100% 0.64 times). All evaluate
once, at the end, on the full test set of their classes. Arms (get_grid):
- data: ViT (the quickstart's 0.55M ViT, patch 7, 4x4 tokens at 28px), hybrid (ResNet root +
  2x2 patches at 32px: 4x4 tokens, 0.58M) and ResNet (`ResNet-11_28px`, 0.50M) on 1/5/20/100%
  of the training set (class-balanced slices of the image folders);
- remedies for the ViT at 1% and 5%: RandAugment(2, 10) + pad/flip + Mixup 0.2, and
  RandAugment(2, 5) alone; stochastic depth 0.2 + weight decay 0.3 (not 0.05); hard (and
  soft, tau 4) distillation from the ResNet of the same slice and seed; patch 4 (7x7 tokens);
  the hybrid stem is the data arm's hybrid;
- pretraining: the ViT on classes 0-4 (all their images), then fine-tuned (new head, same
  recipe) on classes 5-9 with 1% / 10% of their images, against the same from scratch;
- position embeddings none / learn (1-D, the default) / learn_2d / sincos2d at 5% and 100%.
Data: `prepare_folders` (vit_jax/study.py) writes Fashion-MNIST once as image folders (and the
class subsets 0-4, 5-9 as linked folders) under `--out`/data.

Commands (the grid; one run by hand, here on TFDS fashion_mnist):
  python -m vit_jax.study --grid=configs/study_fashion_mnist.py --out=runs/study
  python -m vit_jax.main --config=configs/study_fashion_mnist.py:model=resnet,seed=1 \
    --workdir=runs/study_resnet
`:runlocal` shrinks both (config_lib.shrink; the grid to four runs on 8 images per class).
Expected / measured: docs/small_data_study.md (2 vCPUs, 2026-11-24), generated from the runs.
"""

from typing import Dict, List

import ml_collections

from vit_jax import config_lib
from vit_jax import study

MODELS = ('vit', 'vit4', 'hybrid', 'resnet')
REMEDIES = ('none', 'aug', 'aug_mild', 'reg', 'distill', 'distill_soft')
POSEMBS = ('learn', 'none', 'learn_2d', 'sincos2d')
CLASS_SETS = ('all', '0-4', '5-9')
TEACHER = 'ResNet-11_28px'
DEFAULTS = dict(model='vit', pct='100', seed='0', remedy='none', posemb='learn', classes='all',
                steps='300', root='')


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
  """The four models at ~0.5M parameters; returns the model and sets no data fields."""
  if name == 'resnet':
    return config_lib.with_model(config_lib.get_config(), TEACHER).model
  if name not in MODELS:
    raise ValueError(f'Unknown model {name!r}; use one of {", ".join(MODELS)}.')
  patch = {'vit': 7, 'vit4': 4, 'hybrid': 2}[name]
  # The hybrid's root (7x7/2 conv to 64 channels, 3x3/2 max-pool) maps 32px to an 8x8 grid.
  model = config_lib.small_vit(f'study-{name}', patch=patch, hidden=128, layers=4, mlp=256,
                               heads=4, resnet_layers=() if name == 'hybrid' else None)
  model.attention_impl = 'heads_first'  # Fastest on CPU; same numbers as 'xla'.
  return model


def dataset(values: Dict[str, str]) -> str:
  """TFDS fashion_mnist without `root`; else the image folder of the class set."""
  if not values['root']:
    if values['classes'] != 'all':
      raise ValueError('classes=0-4/5-9 needs root=FOLDERS written by '
                       'vit_jax.study.prepare_folders (the grid does it).')
    return 'fashion_mnist'
  if values['classes'] not in CLASS_SETS:
    raise ValueError(f'Unknown classes={values["classes"]}; use one of {CLASS_SETS}.')
  classes = None if values['classes'] == 'all' else [int(c) for c in values['classes'].split('-')]
  return f'{values["root"]}/{study.folder_name(classes)}'


def get_config(arg: str = '') -> ml_collections.ConfigDict:
  """One run of the study: `model=,pct=,seed=,remedy=,posemb=,classes=,steps=,root=` (,runlocal)."""
  values = parse(arg)
  config = config_lib.with_dataset(config_lib.get_config(), dataset(values))
  config.model = model_config(values['model'])
  steps, pct = int(values['steps']), float(values['pct'])
  train = 'train' if pct == 100 else f'train[:{values["pct"]}%]'
  crop = 32 if values['model'] == 'hybrid' else 28
  config.pp.update(dict(crop=crop, train_aug='none', train=train, test='test'))
  # The quickstart's stage-1 recipe (AdamW, cosine, batch 128, no augmentation), eval at the end.
  config.update(dict(
      seed=int(values['seed']), pretrained_dir='', total_steps=steps, optim='adamw', base_lr=1.5e-3,
      weight_decay=0.05, warmup_steps=steps // 10, batch=128, batch_eval=1000, accum_steps=1,
      progress_every=25, eval_every=0, checkpoint_every=200, keep_checkpoints=1))
  if values['posemb'] != 'learn':
    config.model.posemb = values['posemb']
  apply_remedy(config, values['remedy'])
  return config_lib.finish(config, bool(values['runlocal']))


def apply_remedy(config: ml_collections.ConfigDict, remedy: str) -> None:
  """Strong augmentation, regularisation or distillation (teacher_path comes from the command)."""
  if remedy not in REMEDIES:
    raise ValueError(f'Unknown remedy={remedy!r}; use one of {", ".join(REMEDIES)}.')
  if remedy == 'aug':
    config.pp.train_aug = 'pad_flip'
    config.pp.randaug.update(dict(num_layers=2, magnitude=10))
    config.mixup = 0.2
  elif remedy == 'aug_mild':  # Added after 'aug' underfitted in 300 steps: half the magnitude.
    config.pp.randaug.update(dict(num_layers=2, magnitude=5))
  elif remedy == 'reg':
    config.model.stochastic_depth = 0.2
    config.weight_decay = 0.3
  elif remedy == 'distill':
    config.distill.update(dict(teacher_model=TEACHER, kind='hard', alpha=0.5))
  elif remedy == 'distill_soft':  # Added after hard distillation equalled the baseline.
    config.distill.update(dict(teacher_model=TEACHER, kind='soft', alpha=0.5, temperature=4.))


def command(**values) -> str:
  """The exact `python -m vit_jax.main` command of one run (its workdir is added by the runner)."""
  extra = values.pop('extra', '')
  arg = ','.join(f'{k}={v}' for k, v in values.items() if k != 'runlocal' and v != '')
  arg += ',runlocal' if values.get('runlocal') else ''
  return f'python -m vit_jax.main --config=configs/study_fashion_mnist.py:{arg}{extra}'


def get_grid(arg: str = '') -> study.Grid:
  """All arms: `steps=N` per run, `seeds=N` for the arms in `seeded` (others: seed 0 only).

  The defaults are what docs/small_data_study.md ran in its hour of 2 cores: 300 steps, two
  seeds for the data arm. `seeds=2,steps=600,seeded=data+remedies+pretrain+posemb` is the full
  grid (~3 h there). `runlocal`: 4 smoke runs.
  """
  parts, runlocal = config_lib.parse_arg(arg)
  opts = dict(seeds='2', steps='300', seeded='data')
  for part in parts:
    key, sep, value = part.partition('=')
    if not sep or key not in opts:
      raise ValueError(f'Bad grid arg {part!r}; use seeds=N, steps=N, seeded=ARM+ARM (of '
                       f'{"+".join(ARMS)}) and/or runlocal.')
    opts[key] = value
  seeded = opts['seeded'].split('+')
  if not set(seeded) <= set(ARMS):
    raise ValueError(f'Unknown arm in seeded={opts["seeded"]}; use arms of {"+".join(ARMS)}.')
  base = dict(steps=opts['steps'], root='{out}/data', runlocal='1' if runlocal else '')
  runs = smoke_runs(base) if runlocal else [
      r for s in range(int(opts['seeds']))  # Seed by seed: a cut grid still has every arm.
      for name, arm in ARMS.items() if s == 0 or name in seeded for r in arm(base, s)]
  return study.Grid(runs=runs, tables=TABLES, folders='{out}/data', folder_limit=8 * runlocal)


def run(name: str, tags: Dict, base: Dict, **values) -> study.Run:
  return study.Run(name, command(**base, **values), tags)


def data_runs(base: Dict, s: int) -> List[study.Run]:
  """ViT, hybrid and ResNet on 1/5/20/100% (ResNets first: they teach the distilled ViTs)."""
  names = {'resnet': 'ResNet', 'vit': 'ViT', 'hybrid': 'hybrid'}
  # The same runs are the remedies' baseline and hybrid-stem rows and the posemb 'learn' row.
  extra = {'vit': dict(remedy='none (ViT)', posemb='learn'), 'hybrid': dict(remedy='hybrid stem'),
           'resnet': dict(remedy='ResNet (reference)')}
  return [run(f'{m}_p{p}_s{s}', dict(arm='data', model=names[m], pct=p, seed=s, **extra[m]),
              base, model=m, pct=p, seed=s)
          for m in names for p in (1, 5, 20, 100)]


def remedy_runs(base: Dict, s: int) -> List[study.Run]:
  """The ViT's remedies at 1% and 5% (the baseline and hybrid cells are the data arm's runs)."""
  runs = []
  for p in (1, 5):
    teacher = f' --config.distill.teacher_path={{out}}/resnet_p{p}_s{s}/params.npz'
    runs += [run(f'vit_p{p}_s{s}_aug', dict(remedy='RandAug+Mixup', pct=p, seed=s), base,
                 model='vit', pct=p, seed=s, remedy='aug'),
             run(f'vit_p{p}_s{s}_reg', dict(remedy='stoch. depth+wd', pct=p, seed=s), base,
                 model='vit', pct=p, seed=s, remedy='reg'),
             run(f'vit_p{p}_s{s}_distill', dict(remedy='hard distill (ResNet)', pct=p, seed=s),
                 base, model='vit', pct=p, seed=s, remedy='distill', extra=teacher),
             run(f'vit4_p{p}_s{s}', dict(remedy='patch 4 (7x7 tokens)', pct=p, seed=s), base,
                 model='vit4', pct=p, seed=s),
             run(f'vit_p{p}_s{s}_augmild', dict(remedy='RandAug(2, 5) only', pct=p, seed=s),
                 base, model='vit', pct=p, seed=s, remedy='aug_mild'),
             run(f'vit_p{p}_s{s}_distillsoft', dict(remedy='soft distill (ResNet, tau 4)',
                                                    pct=p, seed=s),
                 base, model='vit', pct=p, seed=s, remedy='distill_soft', extra=teacher)]
  return runs


def pretrain_runs(base: Dict, s: int) -> List[study.Run]:
  """ViT on classes 0-4 (all; once), then on 5-9 at 1%/10%: fine-tuned from it vs scratch."""
  runs = [run('vit_c0-4_pretrain', dict(arm='pretrain'), base, model='vit', classes='0-4')
          ] if s == 0 else []
  init = ' --config.pretrained_path={out}/vit_c0-4_pretrain/params.npz'
  for p in (1, 10):
    runs += [run(f'vit_c5-9_p{p}_s{s}_scratch', dict(init='from scratch', pct=p, seed=s), base,
                 model='vit', classes='5-9', pct=p, seed=s),
             run(f'vit_c5-9_p{p}_s{s}_finetune', dict(init='pretrained on 0-4', pct=p, seed=s),
                 base, model='vit', classes='5-9', pct=p, seed=s, extra=init)]
  return runs


def posemb_runs(base: Dict, s: int) -> List[study.Run]:
  """Position embeddings at 5% and 100% ('learn' cells are the data arm's ViT runs)."""
  return [run(f'vit_p{p}_s{s}_pe-{pe}', dict(posemb=pe, pct=p, seed=s), base,
              model='vit', pct=p, seed=s, posemb=pe)
          for p in (5, 100) for pe in POSEMBS[1:]]


def smoke_runs(base: Dict) -> List[study.Run]:
  """One run of each dependency kind: a teacher, a distilled student, pretrain → fine-tune."""
  return [run('resnet_p50', dict(arm='data', model='ResNet', pct=50, seed=0), base,
              model='resnet', pct=50),
          run('vit_p50_distill', dict(arm='data', model='ViT distilled', pct=50, seed=0), base,
              model='vit', pct=50, remedy='distill',
              extra=' --config.distill.teacher_path={out}/resnet_p50/params.npz'),
          run('vit_c0-4', dict(arm='pretrain'), base, model='vit', classes='0-4'),
          run('vit_c5-9_finetune', dict(init='pretrained on 0-4', pct=50, seed=0), base,
              model='vit', classes='5-9', pct=50,
              extra=' --config.pretrained_path={out}/vit_c0-4/params.npz')]


ARMS = {'data': data_runs, 'remedies': remedy_runs, 'pretrain': pretrain_runs,
        'posemb': posemb_runs}
TABLES = (
    study.Table('data_size', 'Test accuracy vs training-set size (same steps)', row='model',
                col='pct', where=dict(arm='data'), col_label='% of train: ', log_x=True),
    study.Table('remedies', 'ViT remedies at small data', row='remedy', col='pct',
                where=dict(pct=(1, 5)), col_label='% of train: '),
    study.Table('pretraining', 'Classes 5-9: pretrained on classes 0-4 vs from scratch',
                row='init', col='pct', col_label='% of 5-9 train: '),
    study.Table('posemb', 'ViT position embeddings', row='posemb', col='pct',
                where=dict(pct=(5, 100)), col_label='% of train: '),
)
