r"""Round 4 of the small-data study (issue 63): the best ViT-family recipe the remedies build
together against the strong ResNet at 1%, the ResNet given what the ViT got, the distilled
student against its teacher, and (an accelerator's part) the full-data recipe aiming at 95%
beside a real ResNet-18 (docs/small_data_study.md, Round 4).

  python -m research.small_data --grid=research/small_data/fashion_mnist_round4.py \
    --out=runs/study4 --results=docs/study/round4/results.jsonl

Pre-registered: the arms, their selection rules and `CLAIMS` were written on 2026-11-29, before
any run of this round (tests/test_study.py checks each claim's date against git once it is
committed).

`combined` (1%, three slices; every choice on validation):
1. the strong ResNet of each slice at round 3's choice for it (lr, weight decay and steps read
   from docs/study/round3/results.jsonl): the baseline and every distilled run's teacher;
2. each ViT-family candidate (`CANDIDATES`: the hybrid's convolutional stem, Swin's windows, the
   ViT from the MAE encoder of the 60k training images), each with the strong recipe and hard
   distillation from the strong ResNet of its slice, probed at seed 0 for `probe_steps` at its
   round-3 arm's chosen lr (`evals` evaluations); the candidate with the best validation
   accuracy at the end of its probe is the combined recipe, its budget the probe rule's
   (`select.budget_from_curve`);
3. the combined recipe's sweep at seed 0 and that budget: distillation kind `kinds` (hard: the
   teacher's argmax; soft: its tau-4 distribution) compared at lr `kind_lr`, then learning rate
   `lrs` at the kind chosen there, a best lr at the edge adding one run past it (`lr_edge`);
   then seeds 1-2 at the choice. (Pre-registered as the full cross of `lrs` x `kinds`,
   `kind_lr=`; narrowed on 2026-12-02, before the soft run's result, when this session's
   machine measured about twice the step times the estimate assumed: docs/small_data_study.md,
   Round 4, says what it cut.)
4. the ResNet given what the ViT got (`fair=1`): the same strong recipe and the same teacher
   (the strong ResNet of its slice) at the combined recipe's distillation kind, its own probe
   and lr sweep; no label-free step (vit_jax's MAE and MPP train ViTs only). (Narrowed on
   2026-12-02, before the combined recipe's choice: `fair_sweep=if_vit_ahead` runs round 3's
   lr for the strong ResNet first and the rest of the sweep only if the ViT family is not
   behind it; `fair_options`.)
A distillation token (DeiT) where the model has one and starts from scratch (ViT, hybrid); Swin
and the MAE-initialised ViT average both losses on their one head (vit_jax cannot load an encoder
without a `dist` token into a model with one). Every finished run's encoder also gets its few-
shot linear accuracy (round 3's `FEWSHOT`).

`full` (100%; not in the default parts: on 2 vCPUs it is hundreds of hours, round4_estimate.py,
an accelerator's part; its ResNet-18 is the ResNet-18_28px preset): configs/fashion_mnist_95.py's
arms `full_archs` x `full_augs` at the first of `full_epochs` on train[:90%], the best one on
validation at the other epoch counts, the best count on validation; ResNet-18 at the same
augmentation and input size, its epochs chosen the same way; then `seeds` seeds of each on all
of train (their test accuracies read once), and the chosen ViT-family recipe distilled from the
ResNet-18 of its seed at the 1% arm's kind: DeiT's student against its teacher at 100%.

`:runlocal` shrinks it to five smoke runs at 5% on 8 images per class (a teacher, the hybrid
candidate's probe and one sweep run, the fair ResNet's probe and one sweep run), without the
few-shot measurements (round 3's smoke runs them).
"""

import dataclasses
import functools
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from research.small_data import fashion_mnist_grid as round2
from research.small_data import fashion_mnist_round3 as round3
from research.small_data import grid as grid_lib
from research.small_data import records as records_lib
from research.small_data import select
from vit_jax import config_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
ROUND3_RESULTS = os.path.join('docs', 'study', 'round3', 'results.jsonl')
TEACHER_MODEL = config_lib.load_config_module(round2.STUDY_CONFIG).TEACHER  # ResNet-11_28px.
FULL_CONFIG = 'configs/fashion_mnist_95.py'
PARTS = ('combined', 'full')
KINDS = ('hard', 'soft')
FAIR_SWEEPS = ('always', 'if_vit_ahead')  # fair_options.
TEMPERATURE = {'hard': 1, 'soft': 4}  # Soft: round 2's tau 4.


@dataclasses.dataclass(frozen=True)
class Candidate:
  """A recipe arm: `name` in run names, `label` in tables, the study config's `model`, the
  round-3 arm (`parent`, its model label) whose chosen lr its probe uses, whether it starts
  from the MAE encoder, whether it has a distillation token."""
  name: str
  label: str
  model: str
  parent: str
  mae: bool = False
  token: bool = False


CANDIDATES = {c.name: c for c in (
    Candidate('hybrid', 'hybrid (stem) + strong + distilled', 'hybrid28', 'hybrid', token=True),
    Candidate('swin', 'Swin (windows) + strong + distilled', 'swin', 'Swin'),
    Candidate('vit_mae', 'ViT from MAE + strong + distilled', 'vit', 'ViT', mae=True),
)}
FAIR = Candidate('resnet_distill', 'ResNet strong + distilled', 'resnet', 'ResNet')
TEACHER = Candidate('resnet_strong', 'ResNet strong', 'resnet', 'ResNet')
MAE_RUN = 'r4_mae_pretrain'
MAE_COMMAND = 'python -m vit_jax.main --config=configs/fashion_mnist_ssl.py:mae,stage1,patch=7'

OPTIONS = dict(seeds='3', candidates='+'.join(CANDIDATES), lrs='5e-4+1.5e-3+4e-3',
               kinds='+'.join(KINDS), kind_lr='5e-4', probe_steps='6000', evals='10',
               lr_edge='1', tolerance='0.005', fair='1', fair_sweep='if_vit_ahead',
               parts='combined', full_archs='hybrid56+swin28', full_augs='flip+strong',
               full_epochs='22+44+88')
# The smoke's fair ResNet sweeps `lrs` as pre-registered: its run list does not hang on which of
# two 4-step runs is ahead (the conditional sweep is unit-tested: `fair_options`).
LOCAL = dict(seeds='1', candidates='hybrid', lrs='1.5e-3', kinds='hard', kind_lr='',
             probe_steps='4', evals='2', fair_sweep='always')


def parse(arg: str) -> Tuple[Dict[str, str], bool]:
  """The options (`OPTIONS` updated by `key=value` parts) and whether `runlocal` is given."""
  parts, runlocal = config_lib.parse_arg(arg)
  opts = dict(OPTIONS, **(LOCAL if runlocal else {}))
  for part in parts:
    key, sep, value = part.partition('=')
    if not sep or key not in OPTIONS:
      raise ValueError(f'Bad grid arg {part!r}; use {", ".join(f"{k}=" for k in OPTIONS)} '
                       'and/or runlocal.')
    opts[key] = value
  lrs = select.parse_values(opts['lrs'], 'lrs')
  if opts['kind_lr'] and opts['kind_lr'] not in lrs:
    raise ValueError(f'kind_lr={opts["kind_lr"]} is not one of lrs={opts["lrs"]}; compare the '
                     'kinds at one of the swept lrs, or give kind_lr= to cross them all.')
  if opts['fair_sweep'] not in FAIR_SWEEPS:
    raise ValueError(f'Unknown fair_sweep={opts["fair_sweep"]}; use one of '
                     f'{", ".join(FAIR_SWEEPS)}.')
  for name, allowed in (('candidates', CANDIDATES), ('kinds', KINDS), ('parts', PARTS)):
    unknown = sorted(set(opts[name].split('+')) - set(allowed))
    if unknown:
      raise ValueError(f'Unknown {name[:-1]} {unknown[0]!r} in {name}={opts[name]}; use '
                       f'{name} of {"+".join(allowed)}.')
  return opts, runlocal


@functools.lru_cache(maxsize=None)
def round3_choice(parent: str, recipe: str = 'strong') -> Tuple[str, str, int]:
  """(lr, weight decay, steps) round 3 chose on validation for its `parent` arm at 1% (read
  from its committed results: the chosen seed-0 run)."""
  path = os.path.join(ROOT, ROUND3_RESULTS)
  for record in records_lib.read_results(path).values():
    tags = record['tags']
    if (tags.get('model'), tags.get('recipe'), tags.get('pct'), tags.get('seed'),
        tags.get('chosen')) == (parent, recipe, 1, 0, True) and record.get('finished'):
      return tags['lr'], tags['wd'], int(record['steps'])
  raise ValueError(f'{path} has no finished chosen run of round 3\'s {parent} {recipe} arm; '
                   'round 4 starts from round 3\'s choices (git checkout the results file).')


def teacher_name(seed: int, pct: int) -> str:
  return f'r4_{TEACHER.name}_p{pct}_s{seed}'


def distill_flags(seed: int, pct: int, kind: str, token: bool) -> str:
  """The command-line flags that distil from the strong ResNet of the run's slice."""
  flags = [f'--config.distill.teacher_path={{out}}/{teacher_name(seed, pct)}/params.npz',
           f'--config.distill.teacher_model={TEACHER_MODEL}', f'--config.distill.kind={kind}',
           '--config.distill.alpha=0.5', f'--config.distill.temperature={TEMPERATURE[kind]}']
  flags += ['--config.model.distilled=True'] if token else []
  return ''.join(f' {f}' for f in flags)


def arm_run(cand: Candidate, name: str, tags: Dict[str, Any], base: Dict[str, str], *, seed: int,
            pct: int, steps: int, lr: str, kind: str = '', evals: str = '') -> grid_lib.Run:
  """One run of `cand` with the strong recipe (distilled with `kind`; '' = not distilled)."""
  extra = distill_flags(seed, pct, kind, cand.token) if kind else ''
  extra += f' --config.pretrained_path={{out}}/{MAE_RUN}' if cand.mae else ''
  _, wd, _ = round3_choice(cand.parent)
  return round2.run(name, dict(tags, model=cand.label, pct=pct, seed=seed, lr=lr, kind=kind),
                    base, model=cand.model, pct=pct, seed=seed, remedy='strong', steps=steps,
                    lr=lr, wd=wd, evals=evals, extra=extra)


COMBINED_ROW = 'ViT-family combined'
RESNET_ROW = 'ResNet strong (the teacher)'
FAIR_ROW = 'ResNet strong + distilled'
SWEEP_ROW = 'arm, distillation'
CHOSEN = dict(chosen=True)


def teacher_runs(base: Dict[str, str], pct: int, seeds: int) -> List[grid_lib.Run]:
  """The strong ResNet of each slice at round 3's choice: the baseline and the teacher."""
  lr, _, steps = round3_choice(TEACHER.parent)
  return [arm_run(TEACHER, teacher_name(s, pct), dict(arm='teacher', row=RESNET_ROW, chosen=True),
                  base, seed=s, pct=pct, steps=steps, lr=lr) for s in range(seeds)]


def probe_run(cand: Candidate, base: Dict[str, str], pct: int,
              opts: Mapping[str, str]) -> grid_lib.Run:
  """Seed 0 of `cand`, hard-distilled, at its round-3 arm's lr for `probe_steps`."""
  lr, _, _ = round3_choice(cand.parent)
  return arm_run(cand, f'r4_{cand.name}_p{pct}_probe',
                 dict(arm='probe', candidate=cand.label, probe=f'{opts["probe_steps"]} steps'),
                 base, seed=0, pct=pct, steps=int(opts['probe_steps']), lr=lr, kind='hard',
                 evals=opts['evals'])


def sweep_name(cand: Candidate, pct: int, lr: str, kind: str) -> str:
  return f'r4_{cand.name}_p{pct}_s0_lr{lr}_{kind}'


def sweep(cand: Candidate, pct: int, lrs: Sequence[str], kinds: Sequence[str],
          records: grid_lib.Records, edge_steps: int, kind_lr: str = ''
          ) -> Tuple[Dict[Tuple[str, str], str], Optional[Tuple[str, str]]]:
  """The sweep's run names by (lr, kind) and its choice (None until every run has finished):
  a best lr at the edge of `lrs` adds a run one step past it, up to `edge_steps` times.

  With `kind_lr`, the kinds are compared at that lr first and only the kind chosen there sweeps
  `lrs` (the losing kind's run stays in the sweep; it cannot be the choice, being below a run
  of the chosen kind); without it, every lr crosses every kind.
  """
  if kind_lr and len(kinds) > 1:
    first = {(kind_lr, k): sweep_name(cand, pct, kind_lr, k) for k in kinds}
    best = select.choose(first, records)
    if best is None:
      return first, None
    names, chosen = sweep(cand, pct, lrs, best[1:], records, edge_steps)
    return {**first, **names}, chosen
  lrs = list(lrs)
  while True:
    names = {(lr, k): sweep_name(cand, pct, lr, k) for lr in lrs for k in kinds}
    chosen = select.choose(names, records)
    extra = select.beyond_edge(lrs, chosen[0]) if chosen else None
    if extra is None or edge_steps <= 0:
      return names, chosen
    lrs.append(extra)
    edge_steps -= 1


def arm_stages(cand: Candidate, row: str, base: Dict[str, str], pct: int, kinds: Sequence[str],
               opts: Mapping[str, str], records: grid_lib.Records
               ) -> Tuple[List[grid_lib.Run], Optional[Tuple[str, str]]]:
  """A chosen arm's sweep at its probe's budget, then its other seeds at the sweep's choice;
  returns those runs and the (lr, kind) chosen (None until chosen)."""
  budget = select.probe_budget(records.get(f'r4_{cand.name}_p{pct}_probe'),
                               float(opts['tolerance']))
  if budget is None:
    return [], None
  names, chosen = sweep(cand, pct, select.parse_values(opts['lrs'], 'lrs'), kinds, records,
                        int(opts['lr_edge']), opts['kind_lr'])
  runs = [arm_run(cand, name, dict(arm='sweep', lr_value=float(lr), chosen=(lr, k) == chosen,
                                   row=row, **{SWEEP_ROW: f'{cand.label}, {k}'}),
                  base, seed=0, pct=pct, steps=budget, lr=lr, kind=k)
          for (lr, k), name in names.items()]
  if chosen:
    runs += [arm_run(cand, f'r4_{cand.name}_p{pct}_s{s}', dict(arm='combined', row=row,
                                                               chosen=True),
                     base, seed=s, pct=pct, steps=budget, lr=chosen[0], kind=chosen[1])
             for s in range(1, int(opts['seeds']))]
  return runs, chosen


def combined_runs(opts: Mapping[str, str], runlocal: bool, records: grid_lib.Records
                  ) -> Tuple[List[grid_lib.Run], Optional[str]]:
  """The 1% part, stage by stage as the records come; and the distillation kind chosen (None
  until the combined recipe's sweep has chosen)."""
  base = dict(root='{out}/data', runlocal='1' if runlocal else '')
  pct = 5 if runlocal else 1
  candidates = [CANDIDATES[c] for c in opts['candidates'].split('+')]
  runs = teacher_runs(base, pct, int(opts['seeds']))
  if any(c.mae for c in candidates):
    runs.append(grid_lib.Run(MAE_RUN, MAE_COMMAND, dict(arm='ssl_pretrain', method='mae')))
  runs += [probe_run(c, base, pct, opts) for c in candidates]
  fair = opts['fair'] == '1'
  runs += [probe_run(FAIR, base, pct, opts)] if fair else []
  best = select.choose({c.name: f'r4_{c.name}_p{pct}_probe' for c in candidates}, records)
  chosen = None
  if best is not None:
    stages, chosen = arm_stages(CANDIDATES[best], COMBINED_ROW, base, pct,
                                opts['kinds'].split('+'), opts, records)
    runs += stages
  if fair and chosen is not None:  # The ResNet at the kind the ViT family chose.
    combined = sweep_name(CANDIDATES[best], pct, *chosen)
    runs += arm_stages(FAIR, FAIR_ROW, base, pct, (chosen[1],),
                       fair_options(opts, records, pct, chosen[1], combined), records)[0]
  return runs, chosen[1] if chosen else None


def fair_options(opts: Mapping[str, str], records: grid_lib.Records, pct: int, kind: str,
                 combined: str) -> Mapping[str, str]:
  """The fair ResNet's sweep: the combined recipe's lrs and edge (`fair_sweep=always`, as
  pre-registered), or (`if_vit_ahead`) first round 3's lr for the strong ResNet alone, and the
  rest only if the combined recipe's chosen seed-0 run (`combined`) is not below it on
  validation (the sweep then holds that lr even where `lrs` lacks it, so its run is not
  wasted). When the ViT family is behind, a sweep that includes that lr could only raise the
  ResNet's validation accuracy and widen the gap, so claim 2's verdict stays conservative
  toward the ViT; claim 3 then compares the ResNet with and without distillation at one lr."""
  if opts['fair_sweep'] == 'always':
    return opts
  lr, _, _ = round3_choice(FAIR.parent)
  resnet = select.finished_val(records.get(sweep_name(FAIR, pct, lr, kind)))
  vit = select.finished_val(records.get(combined))
  if resnet is not None and vit is not None and vit >= resnet:
    lrs = set(select.parse_values(opts['lrs'], 'lrs')) | {lr}  # The run made first counts.
    return dict(opts, lrs='+'.join(sorted(lrs, key=float)))
  return dict(opts, lrs=lr, lr_edge='0')


FULL_ROW = 'ViT-family recipe'
R18_ROW = 'ResNet-18'
STUDENT_ROW = 'ViT-family recipe, distilled from ResNet-18'
FULL_COL = 'all of train, test'


def full_command(**values) -> str:
  arg = ','.join(f'{k}={v}' for k, v in values.items() if v != '')
  return f'python -m vit_jax.main --config={FULL_CONFIG}:{arg}'


def full_runs(opts: Mapping[str, str], records: grid_lib.Records,
              kind: Optional[str]) -> List[grid_lib.Run]:
  """The full-data part, stage by stage (module docstring); the students wait for `kind`."""
  archs, augs = opts['full_archs'].split('+'), opts['full_augs'].split('+')
  epochs = opts['full_epochs'].split('+')
  seeds = range(int(opts['seeds']))

  def candidate(arch: str, aug: str, e: str, size: str = '') -> grid_lib.Run:
    return grid_lib.Run(f'r4_full_{arch}_{aug}_e{e}_val',
                        full_command(arch=arch, aug=aug, epochs=e, size=size, split='val'),
                        dict(arm='full_val', full=f'{arch}, {aug}', epochs=int(e)))

  screen = {(a, g): candidate(a, g, epochs[0]) for a in archs for g in augs}
  runs = list(screen.values())
  best = select.choose({k: r.name for k, r in screen.items()}, records)
  if best is None:
    return runs
  arch, aug = best
  longer = {e: candidate(arch, aug, e) for e in epochs[1:]}
  size = FULL_SIZES.get(arch, '')
  resnet = {e: candidate('resnet18', aug, e, size) for e in epochs}
  runs += list(longer.values()) + list(resnet.values())
  vit_epochs = select.choose(dict({epochs[0]: screen[best].name},
                                  **{e: r.name for e, r in longer.items()}), records)
  resnet_epochs = select.choose({e: r.name for e, r in resnet.items()}, records)

  def final(name: str, row: str, **values) -> List[grid_lib.Run]:
    return [grid_lib.Run(f'r4_full_{name}_s{s}', full_command(**values, seed=s) + (
        f' --config.distill.teacher_path={{out}}/r4_full_resnet18_s{s}/params.npz'
        if values.get('distill') else ''), dict(arm='full', row=row, col=FULL_COL, seed=s,
                                                chosen=True)) for s in seeds]

  runs += final('vit', FULL_ROW, arch=arch, aug=aug, epochs=vit_epochs) if vit_epochs else []
  runs += final('resnet18', R18_ROW, arch='resnet18', aug=aug, epochs=resnet_epochs,
                size=size) if resnet_epochs else []
  if vit_epochs and resnet_epochs and kind:
    runs += final('student', STUDENT_ROW, arch=arch, aug=aug, epochs=vit_epochs, distill=kind)
  return runs


# The input size each full-data arm reads (ResNet-18 runs at its chosen rival's).
FULL_SIZES = {'hybrid56': '56', 'hybrid28': '28', 'swin28': '28'}


def grid_runs(opts: Mapping[str, str], runlocal: bool,
              records: grid_lib.Records) -> List[grid_lib.Run]:
  runs, kind = combined_runs(opts, runlocal, records)
  if 'full' in opts['parts'].split('+') and not runlocal:
    runs += full_runs(opts, records, kind)
  if 'combined' not in opts['parts'].split('+'):  # The full part alone (its students still
    runs = [r for r in runs if r.name.startswith('r4_full_')]  # wait for the 1% kind).
  return runs


def get_grid(arg: str = '') -> grid_lib.Grid:
  """Round 4's grid (options: `OPTIONS`); later stages' runs appear as their records come."""
  opts, runlocal = parse(arg)

  def make(records: grid_lib.Records) -> grid_lib.Grid:
    return grid_lib.Grid(runs=grid_runs(opts, runlocal, records), tables=TABLES,
                         claims=() if runlocal else CLAIMS, folders='{out}/data',
                         folder_limit=8 * runlocal, resolve=make,
                         # The smoke leaves few-shot out: round 3's smoke runs the same
                         # runner path, and each measurement is a process of its own.
                         fewshot=None if runlocal else round3.FEWSHOT)

  return make({})


TABLES = (
    grid_lib.Table('r4_combined', 'Combined recipes at 1%: lr, distillation and budget chosen '
                   'on validation (test)', row='row', col='pct', where=CHOSEN,
                   col_label='% of train: ',
                   baseline={COMBINED_ROW: RESNET_ROW, FAIR_ROW: RESNET_ROW}),
    grid_lib.Table('r4_combined_val', 'Combined recipes at 1% (validation: where the choices '
                   'were made)', row='row', col='pct', where=CHOSEN, col_label='% of train: ',
                   metric='accuracy_val'),
    grid_lib.Table('r4_candidates', 'Seed-0 probes, hard-distilled: the ViT-family candidates '
                   'and the fair ResNet (validation at the probe\'s end: the choice)',
                   row='candidate', col='probe', where=dict(arm='probe'), metric='accuracy_val',
                   curves=True),
    grid_lib.Table('r4_sweep', 'Learning rate x distillation sweep at seed 0 (validation)',
                   row=SWEEP_ROW, col='lr_value', where=dict(arm='sweep'), col_label='lr ',
                   log_x=True, sort_cols=True, metric='accuracy_val'),
    grid_lib.Table('r4_combined_fewshot', 'Combined recipes at 1%: 10-shot linear accuracy of '
                   'the encoder (test)', row='row', col='pct', where=CHOSEN,
                   col_label='% of train: ', metric=round3.FEWSHOT_METRIC,
                   baseline={COMBINED_ROW: RESNET_ROW, FAIR_ROW: RESNET_ROW}),
    grid_lib.Table('r4_full_val', 'The full-data recipe: choices on validation', row='full',
                   col='epochs', where=dict(arm='full_val'), col_label='epochs ',
                   metric='accuracy_val', sort_cols=True),
    grid_lib.Table('r4_full', 'The full-data recipe, ResNet-18 and the distilled student at '
                   'their chosen epochs (test)', row='row', col='col', where=dict(arm='full'),
                   baseline={FULL_ROW: R18_ROW, STUDENT_ROW: R18_ROW}),
)

# Written on 2026-11-29, before any run of this round (claim_history.py checks it once
# committed).
PREREGISTERED = dict(written='2026-11-29', recorded_then=0)


def _claim(text: str, table: str, plus: str, minus: str, col: Any = 1,
           **kwargs) -> grid_lib.Claim:
  return grid_lib.difference_claim(text, table, plus, minus, col, **kwargs, **PREREGISTERED)


CLAIMS = (
    _claim('A ViT-family model beats the strong ResNet at 1%, the distilled student its '
           'teacher: combined − ResNet strong', 'r4_combined', COMBINED_ROW, RESNET_ROW),
    _claim('The combined recipe beats the ResNet given the same teacher and augmentation (1%): '
           'combined − ResNet distilled', 'r4_combined', COMBINED_ROW, FAIR_ROW),
    _claim('Distillation from the strong ResNet lifts the ResNet too (1%): ResNet distilled − '
           'ResNet strong', 'r4_combined', FAIR_ROW, RESNET_ROW),
    _claim('The combined recipe\'s encoder beats the strong ResNet\'s in 10-shot linear accuracy '
           '(1%)', 'r4_combined_fewshot', COMBINED_ROW, RESNET_ROW),
    grid_lib.Claim('The full-data ViT-family recipe reaches 95.0% test accuracy: recipe − 95',
                   'r4_full', ((1, FULL_ROW),), FULL_COL, target=95., **PREREGISTERED),
    _claim('At full data the ViT-family recipe is as good as ResNet-18 (within 1 point) or '
           'better', 'r4_full', FULL_ROW, R18_ROW, FULL_COL, kind='at_least'),
    _claim('At full data the distilled student beats its teacher: student − ResNet-18',
           'r4_full', STUDENT_ROW, R18_ROW, FULL_COL),
)
