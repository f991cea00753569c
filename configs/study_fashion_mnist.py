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
1% and 10%, against the same from scratch); position embeddings at 5%.
Data: `prepare_folders` (vit_jax/study.py) writes Fashion-MNIST once as image folders (and the
class subsets 0-4, 5-9 as linked folders) under `--out`/data.

Commands (the grid, resumable; one run by hand, here on TFDS fashion_mnist):
  python -m vit_jax.study --grid=configs/study_fashion_mnist.py --out=runs/study2 \
    --results=docs/study/results.jsonl
  python -m vit_jax.main --config=configs/study_fashion_mnist.py:model=resnet,pct=5,seed=1 \
    --workdir=runs/study_resnet
`:runlocal` shrinks both (config_lib.shrink; the grid to four runs on 8 images per class).
Expected / measured: docs/small_data_study.md (2 vCPUs), generated from docs/study/results.jsonl.
"""

import dataclasses
from typing import Dict, List, Tuple

import ml_collections

from vit_jax import config_lib
from vit_jax import study

MODELS = ('vit', 'vit4', 'vit_w64', 'vit_d2', 'hybrid', 'resnet', 'swin')
REMEDIES = ('none', 'aug', 'aug_mild', 'reg', 'distill', 'distill_soft', 'distill_token',
            'distill_token_soft', 'combo')
POSEMBS = ('learn', 'none', 'learn_2d', 'sincos2d')
CLASS_SETS = ('all', '0-4', '5-9')
TEACHER = 'ResNet-11_28px'
SWIN = 'Swin-FMNIST_2_7'
VAL_PCT = 10  # train[90%:] is the validation slice of every run.
TRAIN_EVAL_PCT = 5  # Train accuracy on the first (at most) 5% of train/ of the run's slice.
DEFAULTS = dict(model='vit', pct='100', seed='0', remedy='none', posemb='learn', classes='all',
                steps='300', root='', evals='1')


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
  patch = {'vit4': 4, 'hybrid': 2}.get(name, 7)
  hidden, layers, mlp, heads = dict(vit_w64=(64, 4, 128, 2), vit_d2=(128, 2, 256, 4)).get(
      name, (128, 4, 256, 4))
  # The hybrid's root (7x7/2 conv to 64 channels, 3x3/2 max-pool) maps 32px to an 8x8 grid.
  model = config_lib.small_vit(f'study-{name}', patch=patch, hidden=hidden, layers=layers,
                               mlp=mlp, heads=heads,
                               resnet_layers=() if name == 'hybrid' else None)
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
  steps = int(values['steps'])
  crop = 32 if values['model'] == 'hybrid' else 28
  config.pp.update(dict(crop=crop, train_aug='none', test='test',
                        **splits(values['pct'], int(values['seed']))))
  # The quickstart's stage-1 recipe (AdamW, cosine, batch 128, no augmentation), eval at the end.
  config.update(dict(
      seed=int(values['seed']), pretrained_dir='', total_steps=steps, optim='adamw', base_lr=1.5e-3,
      weight_decay=0.05, warmup_steps=steps // 10, batch=128, batch_eval=1000, accum_steps=1,
      progress_every=25, eval_every=steps // max(int(values['evals']), 1),
      checkpoint_every=200, keep_checkpoints=1))
  if values['model'] == 'swin':
    config.model.stochastic_depth = 0.1  # configs/swin_fashion_mnist.py's (Swin's own) recipe.
  if values['posemb'] != 'learn':
    config.model.posemb = values['posemb']
  apply_remedy(config, values['remedy'])
  return config_lib.finish(config, bool(values['runlocal']))


def apply_remedy(config: ml_collections.ConfigDict, remedy: str) -> None:
  """Augmentation, regularisation, distillation (teacher_path comes from the command), or all."""
  if remedy not in REMEDIES:
    raise ValueError(f'Unknown remedy={remedy!r}; use one of {", ".join(REMEDIES)}.')
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


def command(**values) -> str:
  """The exact `python -m vit_jax.main` command of one run (its workdir is added by the runner)."""
  extra = values.pop('extra', '')
  arg = ','.join(f'{k}={v}' for k, v in values.items() if k != 'runlocal' and v != '')
  arg += ',runlocal' if values.get('runlocal') else ''
  return f'python -m vit_jax.main --config=configs/study_fashion_mnist.py:{arg}{extra}'


def get_grid(arg: str = '') -> study.Grid:
  """All arms. Options: `steps=N` for every run or `steps=P:N+P:N` per data fraction (other
  runs take those of the smallest fraction with as many images: `Plan.steps_for`); `seeds=N`
  for the arms in `seeded` (the others: seed 0 only); `pcts=P+P` the fractions of the data arm
  (remedies: 1 and 5 of them); `full_seeds=N` the seeds of the 100% column.

  The default is the plan of docs/small_data_study.md (round 2). `runlocal`: 4 smoke runs.
  """
  parts, runlocal = config_lib.parse_arg(arg)
  opts = dict(seeds='3', steps='1:500+5:800+100:1000', seeded='data+remedies+pretrain',
              pcts='1+5+100', full_seeds='1')
  for part in parts:
    key, sep, value = part.partition('=')
    if not sep or key not in opts:
      raise ValueError(f'Bad grid arg {part!r}; use seeds=N, steps=N or steps=P:N+P:N, '
                       f'pcts=P+P, full_seeds=N, seeded=ARM+ARM (of {"+".join(ARMS)}) and/or '
                       'runlocal.')
    opts[key] = value
  seeded = opts['seeded'].split('+')
  if not set(seeded) <= set(ARMS):
    raise ValueError(f'Unknown arm in seeded={opts["seeded"]}; use arms of {"+".join(ARMS)}.')
  pcts = tuple(int(p) for p in opts['pcts'].split('+'))
  plan = Plan(pcts, parse_steps(opts['steps'], pcts), int(opts['full_seeds']))
  base = dict(root='{out}/data', runlocal='1' if runlocal else '')
  runs = smoke_runs(dict(base, steps=plan.steps[max(pcts)])) if runlocal else [
      r for s in range(int(opts['seeds']))  # Seed by seed: a cut grid still has every arm.
      for name, arm in ARMS.items() if s == 0 or name in seeded for r in arm(base, s, plan)]
  return study.Grid(runs=runs, tables=TABLES, folders='{out}/data', folder_limit=8 * runlocal)


@dataclasses.dataclass(frozen=True)
class Plan:
  """What a grid runs: data fractions, steps per fraction, seeds of the 100% column."""
  pcts: Tuple[int, ...]
  steps: Dict[int, int]
  full_seeds: int

  def pcts_of_seed(self, s: int, wanted: Tuple[int, ...] = ()) -> Tuple[int, ...]:
    """The fractions (of `wanted`, default all) that seed `s` runs: 100% only below full_seeds."""
    return tuple(p for p in (wanted or self.pcts) if p in self.pcts
                 and (p != 100 or s < self.full_seeds))

  def steps_for(self, images_pct: float) -> int:
    """Steps of the smallest fraction with at least `images_pct`% of train/'s images (the
    largest fraction's when none has): classes 5-9 at 10% hold 5% of the images."""
    return self.steps[min((p for p in self.steps if p >= images_pct), default=max(self.steps))]


def parse_steps(text: str, pcts: Tuple[int, ...]) -> Dict[int, int]:
  """'1500' → that for every fraction; '1:800+5:1200+100:1500' → per fraction (all needed)."""
  if ':' not in text:
    return {p: int(text) for p in pcts}
  steps = {int(p): int(n) for p, n in (item.split(':') for item in text.split('+'))}
  missing = [p for p in pcts if p not in steps]
  if missing:
    raise ValueError(f'steps={text} names no steps for pct {missing}; add e.g. +{missing[0]}:1500.')
  return steps


def run(name: str, tags: Dict, base: Dict, **values) -> study.Run:
  return study.Run(name, command(**base, **values), tags)


def teacher_flag(p: int, s: int) -> str:
  return f' --config.distill.teacher_path={{out}}/resnet_p{p}_s{s}/params.npz'


def data_runs(base: Dict, s: int, plan: Plan) -> List[study.Run]:
  """ResNet (first: it teaches the distilled ViTs), ViT and hybrid on each fraction.

  The plain ViT evaluates 4 times (its curves decide the budget); the others at the end.
  """
  names = {'resnet': 'ResNet', 'vit': 'ViT', 'hybrid': 'hybrid'}
  # The same runs are the remedies' baseline, hybrid-stem and locality rows.
  extra = {'vit': dict(remedy='none (ViT)', posemb='learn'), 'hybrid': dict(remedy='hybrid stem'),
           'resnet': dict(remedy='ResNet (reference)')}
  return [run(f'{m}_p{p}_s{s}', dict(arm='data', model=names[m], pct=p, seed=s, **extra[m]),
              base, model=m, pct=p, seed=s, steps=plan.steps[p], evals=4 if m == 'vit' else '')
          for m in names for p in plan.pcts_of_seed(s)]


def locality_runs(base: Dict, s: int, plan: Plan) -> List[study.Run]:
  """Swin (local windows) in the data table; an arm of its own since it costs ~2x the ResNet."""
  return [run(f'swin_p{p}_s{s}', dict(arm='data', model='Swin', pct=p, seed=s,
                                      remedy='Swin (locality)'),
              base, model='swin', pct=p, seed=s, steps=plan.steps[p])
          for p in plan.pcts_of_seed(s)]


REMEDY_RUNS = (  # (run-name suffix, table row, config values)
    ('aug', 'RandAug(2, 10)+Mixup 0.2', dict(remedy='aug')),
    ('reg', 'stoch. depth+wd+dropout', dict(remedy='reg')),
    ('dtok', 'distill token, hard', dict(remedy='distill_token')),
    ('dtoksoft', 'distill token, soft (tau 4)', dict(remedy='distill_token_soft')),
    ('w64', 'smaller: width 64', dict(model='vit_w64')),
    ('d2', 'smaller: depth 2', dict(model='vit_d2')),
    ('p4', 'patch 4 (7x7 tokens)', dict(model='vit4')),
    ('combo', 'combined: RandAug(2, 5)+Mixup+reg+token distill', dict(remedy='combo')),
)


def remedy_runs(base: Dict, s: int, plan: Plan) -> List[study.Run]:
  """The ViT's remedies at 1% and 5% (baseline, hybrid and Swin cells: the data arm's runs)."""
  runs = []
  for p in plan.pcts_of_seed(s, (1, 5)):
    for suffix, row, values in REMEDY_RUNS:
      teacher = teacher_flag(p, s) if values.get('remedy', '').startswith(('distill', 'combo')) \
          else ''
      values = dict(dict(model='vit'), **values)
      runs.append(run(f'vit_p{p}_s{s}_{suffix}', dict(remedy=row, pct=p, seed=s), base,
                      pct=p, seed=s, steps=plan.steps[p], extra=teacher, **values))
  return runs


def pretrain_runs(base: Dict, s: int, plan: Plan) -> List[study.Run]:
  """ViT and ResNet on classes 0-4 (all; once), then on 5-9 at 1%/10%: fine-tuned vs scratch."""
  runs = []
  for m, label in (('vit', 'ViT'), ('resnet', 'ResNet')):
    if s == 0:
      runs.append(run(f'{m}_c0-4_pretrain', dict(arm='pretrain'), base, model=m, classes='0-4',
                      steps=plan.steps_for(50)))
    init = f' --config.pretrained_path={{out}}/{m}_c0-4_pretrain/params.npz'
    for p in (1, 10):
      common = dict(model=m, classes='5-9', pct=p, seed=s, steps=plan.steps_for(p / 2))
      runs += [run(f'{m}_c5-9_p{p}_s{s}_scratch', dict(init=f'{label} from scratch', pct=p,
                                                       seed=s), base, **common),
               run(f'{m}_c5-9_p{p}_s{s}_finetune', dict(init=f'{label} pretrained on 0-4',
                                                        pct=p, seed=s), base, extra=init,
                   **common)]
  return runs


def posemb_runs(base: Dict, s: int, plan: Plan) -> List[study.Run]:
  """Position embeddings at 5% ('learn' cells are the data arm's ViT runs)."""
  return [run(f'vit_p5_s{s}_pe-{pe}', dict(posemb=pe, pct=5, seed=s), base,
              model='vit', pct=5, seed=s, posemb=pe, steps=plan.steps_for(5))
          for pe in POSEMBS[1:]]


def smoke_runs(base: Dict) -> List[study.Run]:
  """One run of each dependency kind: a teacher, a token-distilled student, pretrain → fine-tune."""
  return [run('resnet_p50', dict(arm='data', model='ResNet', pct=50, seed=0), base,
              model='resnet', pct=50),
          run('vit_p50_dtok', dict(arm='data', model='ViT distilled', pct=50, seed=0), base,
              model='vit', pct=50, remedy='distill_token',
              extra=' --config.distill.teacher_path={out}/resnet_p50/params.npz'),
          run('vit_c0-4', dict(arm='pretrain'), base, model='vit', classes='0-4'),
          run('vit_c5-9_finetune', dict(init='pretrained on 0-4', pct=50, seed=0), base,
              model='vit', classes='5-9', pct=50,
              extra=' --config.pretrained_path={out}/vit_c0-4/params.npz')]


ARMS = {'data': data_runs, 'locality': locality_runs, 'remedies': remedy_runs,
        'pretrain': pretrain_runs, 'posemb': posemb_runs}
TABLES = (
    study.Table('data_size', 'Test accuracy vs training-set size (same steps)', row='model',
                col='pct', where=dict(arm='data'), col_label='% of train: ', log_x=True),
    study.Table('data_size_train', 'Train accuracy vs training-set size', row='model',
                col='pct', where=dict(arm='data'), col_label='% of train: ', log_x=True,
                metric='accuracy_train'),
    study.Table('remedies', 'ViT remedies at small data (test)', row='remedy', col='pct',
                where=dict(pct=(1, 5)), col_label='% of train: '),
    study.Table('remedies_val', 'ViT remedies at small data (validation: for choices)',
                row='remedy', col='pct', where=dict(pct=(1, 5)), col_label='% of train: ',
                metric='accuracy_val'),
    study.Table('pretraining', 'Classes 5-9: pretrained on classes 0-4 vs from scratch',
                row='init', col='pct', col_label='% of 5-9 train: '),
    study.Table('posemb', 'ViT position embeddings', row='posemb', col='pct',
                where=dict(pct=5), col_label='% of train: '),
)
