"""The grid of the small-data study on Fashion-MNIST (docs/small_data_study.md).

  python -m research.small_data --grid=research/small_data/fashion_mnist_grid.py \
    --out=runs/study2 --results=docs/study/results.jsonl

Each run is one exact `python -m vit_jax.main --config=configs/study_fashion_mnist.py:...`
command (that config file says what one run trains); this file lists the runs of each arm
(data size, locality, remedies, pretraining, position embeddings) in dependency order and the
report's tables. `:runlocal` gives four smoke runs on 8 images per class.
"""

import dataclasses
from typing import Dict, List, Tuple

from research.small_data import grid as grid_lib
from vit_jax import config_lib

STUDY_CONFIG = 'configs/study_fashion_mnist.py'
# The study config's validation slice is train[100 - VAL_PCT %:] of every run.
VAL_PCT = int(config_lib.load_config_module(STUDY_CONFIG).VAL_PCT)
POSEMBS = ('none', 'learn_2d', 'sincos2d')  # Beside the data arm's 'learn'.
VIT_BASELINE = 'none (ViT)'  # The remedies' baseline row: the data arm's plain ViT.


def command(**values) -> str:
  """The exact `python -m vit_jax.main` command of one run (its workdir is added by the runner)."""
  extra = values.pop('extra', '')
  arg = ','.join(f'{k}={v}' for k, v in values.items() if k != 'runlocal' and v != '')
  arg += ',runlocal' if values.get('runlocal') else ''
  return f'python -m vit_jax.main --config={STUDY_CONFIG}:{arg}{extra}'


def get_grid(arg: str = '') -> grid_lib.Grid:
  """All arms. Options: `steps=N` for every run or `steps=P:N+P:N` per data fraction (other
  runs take those of the smallest fraction with as many images: `Plan.steps_for`); `seeds=N`
  for the arms in `seeded` (the others: seed 0 only; `ARM:N` gives that arm N seeds, at most
  `seeds`); `pcts=P+P` the fractions of the data arm (remedies: 1 and 5 of them);
  `full_seeds=N` the seeds of the 100% column; `later_pcts=P+P` the fractions where seeds
  after the first run the remedies, `later_skip=SUFFIX+SUFFIX` remedies run at the first seed
  only (`-` for none); `budget_pcts=P+P` the fractions of the 4x-steps arm.

  The default is the plan of docs/small_data_study.md (round 2, cut to fit its ~8 h budget:
  later seeds of the remedies at 1% only and without patch 4, 3x the ViT's compute; the 4x
  arm at 1%; pretraining at one seed). `runlocal`: 4 smoke runs.
  """
  parts, runlocal = config_lib.parse_arg(arg)
  opts = dict(seeds='3', steps='1:1000+5:1500+100:1000', seeded='data+remedies',
              pcts='1+5+100', full_seeds='1', later_pcts='1', later_skip='p4', budget_pcts='1')
  for part in parts:
    key, sep, value = part.partition('=')
    if not sep or key not in opts:
      raise ValueError(f'Bad grid arg {part!r}; use seeds=N, steps=N or steps=P:N+P:N, '
                       f'pcts=P+P, full_seeds=N, seeded=ARM[:N]+ARM (of {"+".join(ARMS)}), '
                       'later_pcts=P+P, later_skip=SUFFIX+SUFFIX, budget_pcts=P+P and/or '
                       'runlocal.')
    opts[key] = value
  seeds = int(opts['seeds'])
  arm_seeds = parse_seeded(opts['seeded'], seeds)
  pcts = parse_pcts(opts['pcts'])
  plan = Plan(pcts, parse_steps(opts['steps'], pcts), int(opts['full_seeds']),
              parse_pcts(opts['later_pcts']), parse_skip(opts['later_skip']),
              parse_pcts(opts['budget_pcts']))
  base = dict(root='{out}/data', runlocal='1' if runlocal else '')
  runs = smoke_runs(dict(base, steps=plan.steps[max(pcts)])) if runlocal else [
      r for s in range(seeds)  # Seed by seed: a cut grid still has every arm ...
      for name, arm in ARMS.items() if s < arm_seeds.get(name, 1) for r in arm(base, s, plan)
  ] + budget_runs(base, 0, plan)  # ... and the longest runs come last (their teachers first).
  return grid_lib.Grid(runs=runs, tables=TABLES, folders='{out}/data', folder_limit=8 * runlocal,
                       claims=() if runlocal else CLAIMS)


def parse_seeded(text: str, seeds: int) -> Dict[str, int]:
  """'data+pretrain:2' → {'data': seeds, 'pretrain': 2}: how many seeds each named arm runs."""
  arm_seeds = {}
  for item in text.split('+'):
    name, _, count = item.partition(':')
    if name not in ARMS or (count and not count.isdigit()):
      raise ValueError(f'Unknown arm or count {item!r} in seeded={text}; use ARM or ARM:N with '
                       f'arms of {"+".join(ARMS)}.')
    arm_seeds[name] = min(int(count), seeds) if count else seeds
  return arm_seeds


@dataclasses.dataclass(frozen=True)
class Plan:
  """What a grid runs: data fractions, steps per fraction, seeds of the 100% column."""
  pcts: Tuple[int, ...]
  steps: Dict[int, int]
  full_seeds: int
  later_pcts: Tuple[int, ...]  # The remedies' fractions after the first seed.
  later_skip: Tuple[str, ...]  # Remedies (run-name suffixes) of the first seed only.
  budget_pcts: Tuple[int, ...]

  def pcts_of_seed(self, s: int, wanted: Tuple[int, ...] = ()) -> Tuple[int, ...]:
    """The fractions (of `wanted`, default all) that seed `s` runs: 100% only below full_seeds."""
    return tuple(p for p in (wanted or self.pcts) if p in self.pcts
                 and (p != 100 or s < self.full_seeds))

  def steps_for(self, images_pct: float) -> int:
    """Steps of the smallest fraction with at least `images_pct`% of train/'s images (the
    largest fraction's when none has): classes 5-9 at 10% hold 5% of the images."""
    return self.steps[min((p for p in self.steps if p >= images_pct), default=max(self.steps))]


def parse_pcts(text: str) -> Tuple[int, ...]:
  if not all(p.isdigit() for p in text.split('+')):
    raise ValueError(f'Bad fractions {text!r}; use P+P, e.g. 1+5.')
  return tuple(int(p) for p in text.split('+'))


def parse_skip(text: str) -> Tuple[str, ...]:
  """'p4+w64' → those remedies' run-name suffixes (each one of REMEDY_RUNS); '-' → none."""
  skip = () if text == '-' else tuple(text.split('+'))
  unknown = [s for s in skip if s not in REMEDY_ROWS]
  if unknown:
    raise ValueError(f'Unknown remedy {unknown[0]!r} in later_skip={text}; use - or suffixes of '
                     f'{"+".join(REMEDY_ROWS)}.')
  return skip


def parse_steps(text: str, pcts: Tuple[int, ...]) -> Dict[int, int]:
  """'1500' → that for every fraction; '1:800+5:1200+100:1500' → per fraction (all needed)."""
  if ':' not in text:
    return {p: int(text) for p in pcts}
  steps = {int(p): int(n) for p, n in (item.split(':') for item in text.split('+'))}
  missing = [p for p in pcts if p not in steps]
  if missing:
    raise ValueError(f'steps={text} names no steps for pct {missing}; add e.g. +{missing[0]}:1500.')
  return steps


def run(name: str, tags: Dict, base: Dict, **values) -> grid_lib.Run:
  return grid_lib.Run(name, command(**base, **values), tags)


def needs_teacher(remedy: str) -> bool:
  """Distillation and the combined remedies read the ResNet of the same slice and seed."""
  return remedy.startswith(('distill', 'combo'))


def teacher_flag(p: int, s: int) -> str:
  return f' --config.distill.teacher_path={{out}}/resnet_p{p}_s{s}/params.npz'


def data_runs(base: Dict, s: int, plan: Plan) -> List[grid_lib.Run]:
  """ResNet (first: it teaches the distilled ViTs), ViT and hybrid on each fraction.

  The plain ViT evaluates 4 times (its curves decide the budget); the others at the end.
  """
  names = {'resnet': 'ResNet', 'vit': 'ViT', 'hybrid': 'hybrid'}
  # The same runs are the remedies' baseline, hybrid-stem and locality rows.
  extra = {'vit': dict(remedy=VIT_BASELINE, posemb='learn'), 'hybrid': dict(remedy='hybrid stem'),
           'resnet': dict(remedy='ResNet (reference)')}
  return [run(f'{m}_p{p}_s{s}', dict(arm='data', model=names[m], pct=p, seed=s, **extra[m]),
              base, model=m, pct=p, seed=s, steps=plan.steps[p], evals=4 if m == 'vit' else '')
          for m in names for p in plan.pcts_of_seed(s)]


def locality_runs(base: Dict, s: int, plan: Plan) -> List[grid_lib.Run]:
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


def remedy_runs(base: Dict, s: int, plan: Plan) -> List[grid_lib.Run]:
  """The ViT's remedies at 1% and 5%, later seeds at `plan.later_pcts` without
  `plan.later_skip` (baseline, hybrid and Swin cells: the data arm's runs)."""
  runs = []
  for p in plan.pcts_of_seed(s, (1, 5) if s == 0 else plan.later_pcts):
    for suffix, row, values in REMEDY_RUNS:
      if s > 0 and suffix in plan.later_skip:
        continue
      teacher = teacher_flag(p, s) if needs_teacher(values.get('remedy', '')) else ''
      values = dict(dict(model='vit'), **values)
      runs.append(run(f'vit_p{p}_s{s}_{suffix}', dict(arm='remedies', remedy=row, pct=p, seed=s),
                      base,
                      pct=p, seed=s, steps=plan.steps[p], extra=teacher, **values))
  return runs


def pretrain_runs(base: Dict, s: int, plan: Plan) -> List[grid_lib.Run]:
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


def posemb_runs(base: Dict, s: int, plan: Plan) -> List[grid_lib.Run]:
  """Position embeddings at 5% ('learn' cells are the data arm's ViT runs)."""
  return [run(f'vit_p5_s{s}_pe-{pe}', dict(posemb=pe, pct=5, seed=s), base,
              model='vit', pct=5, seed=s, posemb=pe, steps=plan.steps_for(5))
          for pe in POSEMBS]


BUDGET_FACTOR = 4
REMEDY_ROWS = {suffix: row for suffix, row, _ in REMEDY_RUNS}
BUDGET_RUNS = (  # (run-name suffix, table row, remedy): augmentation given the budget it needs.
    ('aug_x4', REMEDY_ROWS['aug'], 'aug'),
    ('x4', VIT_BASELINE, ''))  # The combined remedies at 4x (~25 min a run): cut, see the page.


def budget_runs(base: Dict, s: int, plan: Plan) -> List[grid_lib.Run]:
  """Strong augmentation and the plain ViT at 4x the steps (at `plan.budget_pcts`): augmented
  runs stay far below 100% train accuracy in the remedies' budget."""
  runs = []
  for p in plan.pcts_of_seed(s, plan.budget_pcts):
    for suffix, row, remedy in BUDGET_RUNS:
      teacher = teacher_flag(p, s) if needs_teacher(remedy) else ''
      runs.append(run(f'vit_p{p}_s{s}_{suffix}', dict(arm='budget', remedy=row, pct=p, seed=s),
                      base, model='vit', pct=p, seed=s, remedy=remedy,
                      steps=BUDGET_FACTOR * plan.steps[p], evals=4, extra=teacher))
  return runs


def smoke_runs(base: Dict) -> List[grid_lib.Run]:
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
        'pretrain': pretrain_runs, 'posemb': posemb_runs}  # The budget arm: after all seeds.
REMEDY_TABLE = dict(pct=(1, 5), arm=('data', 'remedies'))  # Not the budget arm's 4x runs.
TABLES = (
    grid_lib.Table('data_size', 'Test accuracy vs training-set size (same steps)', row='model',
                col='pct', where=dict(arm='data'), col_label='% of train: ', log_x=True,
                baseline='ResNet'),
    grid_lib.Table('data_size_train', 'Train accuracy vs training-set size', row='model',
                col='pct', where=dict(arm='data'), col_label='% of train: ', log_x=True,
                metric='accuracy_train'),
    grid_lib.Table('remedies', 'ViT remedies at small data (test)', row='remedy', col='pct',
                where=REMEDY_TABLE, col_label='% of train: ', baseline=VIT_BASELINE),
    grid_lib.Table('remedies_val', 'ViT remedies at small data (validation: for choices)',
                row='remedy', col='pct', where=REMEDY_TABLE, col_label='% of train: ',
                metric='accuracy_val', baseline=VIT_BASELINE),
    grid_lib.Table('budget', f'ViT at {BUDGET_FACTOR}x the steps (test)', row='remedy',
                col='pct', where=dict(arm='budget'), col_label='% of train: ',
                baseline=VIT_BASELINE),
    grid_lib.Table('budget_train', f'ViT at {BUDGET_FACTOR}x the steps (train accuracy)',
                row='remedy', col='pct', where=dict(arm='budget'), col_label='% of train: ',
                metric='accuracy_train'),
    grid_lib.Table('pretraining', 'Classes 5-9: pretrained on classes 0-4 vs from scratch',
                row='init', col='pct', col_label='% of 5-9 train: ',
                baseline={f'{m} pretrained on 0-4': f'{m} from scratch'
                          for m in ('ViT', 'ResNet')}),
    grid_lib.Table('posemb', 'ViT position embeddings', row='posemb', col='pct',
                where=dict(pct=5), col_label='% of train: ', baseline='learn'),
)


# The seed notes' claims were hypotheses before round 2 ran, but their rows here (and so their
# tests) were written on 2026-11-27, after every round-2 run had its record (git:
# claim_history.py).
AFTER_RUNS = dict(written='2026-11-27', recorded_then=grid_lib.ALL_RUNS)


def _remedy_claim(text: str, row: str, pct: int, table: str = 'remedies') -> grid_lib.Claim:
  return grid_lib.difference_claim(f'{text} ({pct}%): {row} − ViT', table, row, VIT_BASELINE, pct,
                                   **AFTER_RUNS)


def _claim(*args, **kwargs) -> grid_lib.Claim:
  return grid_lib.difference_claim(*args, **kwargs, **AFTER_RUNS)


# The seed notes' claims as round 2 tested them (round 3 tests the recipes, locality, position
# embeddings and pretraining again): remedies where the later seeds ran (1%), and at 5% (one
# slice: undecided by construction, listed so that the page says so).
CLAIMS = (
    _claim('A plain ViT loses to a ResNet (1%): ResNet − ViT', 'data_size', 'ResNet', 'ViT', 1),
    _claim('A plain ViT loses to a ResNet (5%): ResNet − ViT', 'data_size', 'ResNet', 'ViT', 5),
) + tuple(
    _remedy_claim(text, REMEDY_ROWS[suffix], pct)
    for text, suffix in (('Strong augmentation helps at the grid\'s steps', 'aug'),
                         ('Regularisation helps', 'reg'),
                         ('Combining remedies helps', 'combo'),
                         ('Distillation from the ResNet helps', 'dtok'),
                         ('Distillation from the ResNet helps', 'dtoksoft'),
                         ('A smaller model helps', 'w64'),
                         ('A smaller model helps', 'd2'),
                         ('Smaller patches help', 'p4'))
    for pct in (1, 5)) + tuple(
    _remedy_claim(text, row, pct) for text, row in (('A convolutional stem helps', 'hybrid stem'),
                                                    ('Local windows help', 'Swin (locality)'))
    for pct in (1, 5)) + (
    _remedy_claim(f'Strong augmentation helps at {BUDGET_FACTOR}x the steps', REMEDY_ROWS['aug'],
                  1, table='budget'),
) + tuple(
    _claim(f'Pretraining on classes 0-4 helps the ViT on 5-9 ({pct}% of 5-9): pretrained − '
           'scratch', 'pretraining', 'ViT pretrained on 0-4', 'ViT from scratch', pct)
    for pct in (1, 10)) + (
    _claim('Position embeddings help (5%): learn − none', 'posemb', 'learn', 'none', 5),
) + tuple(
    _claim(f'The kind matters little (5%): {pe} within 1 point of learn', 'posemb', pe, 'learn',
           5, kind='within')
    for pe in POSEMBS if pe != 'none')
