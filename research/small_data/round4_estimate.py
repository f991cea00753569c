"""How long round 4's grid takes on 2 vCPUs, before any run: step times measured in rounds 2
and 3 (their results files: wall time / steps of each arm's runs), and the run time of each
stage they give (docs/small_data_study.md, Round 4).

  python -c "from research.small_data import round4_estimate as e; e.print_table('')"
  python -c "from research.small_data import round4_estimate as e; e.print_table('parts=full')"

Budgets are known only after the probes: each arm's is taken as its round-3 parent's (the
steps round 3's probe rule gave it, as a share of its probe); the combined recipe's sweep and
seeds are costed at the costliest candidate (an upper bound, since the probes choose which).
"""

import dataclasses
import json
import os
import statistics
from typing import Dict, List, Mapping, Optional, Tuple

from research.small_data import fashion_mnist_round4 as round4
from research.small_data import records as records_lib
from research.small_data import select
from vit_jax import config_lib

ROUND2_RESULTS = os.path.join('docs', 'study', 'results.jsonl')
# The few-shot measurement after each run: "about 30 s a run on 2 vCPUs" (round 3, measured
# beside its runs; docs/small_data_study.md, How round 3 ran).
FEWSHOT_S = 30.
# ResNet-18 (basic blocks (2, 2, 2, 2), widths 64-512, GroupNorm + weight standardisation, 3x3/1
# root, no max-pool) at 28px: 11,173,962 parameters and 863,107,712 forward FLOPs per image by
# XLA's cost analysis of the compiled forward pass (an inline Flax model of that layout,
# 2026-11-29, before the preset). The ResNet-18_28px preset (2026-12-02) counts 773,930,624 the
# same way: kept as written, this estimate is an upper bound. The ResNet-11_28px's count is in
# the records.
RESNET18_FLOPS = 863_107_712
TRAIN_IMAGES, VAL_IMAGES = 60_000, 6_000
HOURS = 3600.


@dataclasses.dataclass(frozen=True)
class Rates:
  """Seconds per training step (batch 128) measured in rounds 2 and 3, by (model label, recipe):
  `step` for runs that evaluate at their end, `probe` for 10-evaluation probes; `teacher` the
  teacher's forward added to a distilled step; `mae` one MAE pretraining run (s); `full` a step
  of the 56px full-data hybrid; `resnet_flops` the ResNet-11's forward FLOPs per image."""
  step: Mapping[Tuple[str, str], float]
  probe: Mapping[Tuple[str, str], float]
  teacher: float
  mae: float
  full: float
  resnet_flops: float
  budget_share: Mapping[Tuple[str, str], float]


def _read(path: str) -> List[Dict]:
  return [r for r in records_lib.read_results(os.path.join(round4.ROOT, path)).values()
          if r.get('finished') and r.get('steps')]


def measured_rates() -> Rates:
  """The rates of the committed results files (medians over each arm's runs)."""
  round3 = _read(round4.ROUND3_RESULTS)
  round2 = {r['name']: r for r in _read(ROUND2_RESULTS)}

  def per_step(runs: List[Dict]) -> float:
    return statistics.median(r['wall_s'] / r['steps'] for r in runs)

  arms = {(r['tags']['model'], r['tags']['recipe']) for r in round3 if r['tags'].get('recipe')}
  step, probe, share = {}, {}, {}
  for model, recipe in arms:
    runs = [r for r in round3 if (r['tags'].get('model'), r['tags'].get('recipe'),
                                  r['tags'].get('pct')) == (model, recipe, 1)]
    step[model, recipe] = per_step([r for r in runs if r['tags']['arm'] in ('sweep', 'matched')])
    probes = [r for r in runs if r['tags']['arm'] == 'probe']
    probe[model, recipe] = per_step(probes)
    _, _, steps = round4.round3_choice(model, recipe)
    share[model, recipe] = steps / probes[0]['steps']
  # The teacher's forward: round 2's token-distilled ViTs at 1% against its plain ViTs at 1%.
  distilled = [r for n, r in round2.items() if n.startswith('vit_p1_s') and 'dtok' in n]
  plain = [round2[f'vit_p1_s{s}'] for s in range(3)]
  full = [r for r in round3 if r['tags'].get('arm', '').startswith('full')]
  mae = next(r for r in round3 if r['name'] == 'r3_mae_pretrain')
  resnet = next(r for r in round3 if r['tags'].get('model') == 'ResNet')
  return Rates(step, probe, per_step(distilled) - per_step(plain), mae['wall_s'],
               per_step(full), resnet['forward_flops'], share)


def _stage_rate(rates: Rates, cand: round4.Candidate, distilled: bool = True) -> float:
  return rates.step[cand.parent, 'strong'] + rates.teacher * distilled


def combined_seconds(opts: Mapping[str, str], rates: Rates) -> Dict[str, float]:
  """The 1% part's stages (s): teachers, MAE, probes, sweep (+ its edge runs), other seeds,
  the fair ResNet's sweep and seeds, and the few-shot measurements."""
  seeds, probe_steps = int(opts['seeds']), int(opts['probe_steps'])
  lrs = len(select.parse_values(opts['lrs'], 'lrs'))
  kinds, edge = len(opts['kinds'].split('+')), int(opts['lr_edge']) > 0
  candidates = [round4.CANDIDATES[c] for c in opts['candidates'].split('+')]
  fair = opts['fair'] == '1'
  _, _, teacher_steps = round4.round3_choice(round4.TEACHER.parent)
  out = dict(teachers=seeds * _stage_rate(rates, round4.TEACHER, False) * teacher_steps,
             mae=rates.mae * any(c.mae for c in candidates))
  probes = candidates + [round4.FAIR] * fair
  out['probes'] = sum((rates.probe[c.parent, 'strong'] + rates.teacher) * probe_steps
                      for c in probes)

  def run_s(cand: round4.Candidate) -> float:
    return _stage_rate(rates, cand) * rates.budget_share[cand.parent, 'strong'] * probe_steps

  costliest = max(run_s(c) for c in candidates)
  # Kinds compared at one lr (`kind_lr`), then the lrs at the chosen kind; else the full cross.
  kind_first = bool(opts['kind_lr']) and kinds > 1
  sweep_runs = kinds + lrs - 1 if kind_first else lrs * kinds
  edge_runs = edge * (1 if kind_first else kinds)
  out.update(sweep=sweep_runs * costliest, edge=edge_runs * costliest,
             seeds=(seeds - 1) * costliest)
  fair_run = run_s(round4.FAIR) * fair
  out.update(fair_sweep=(lrs + edge) * fair_run, fair_seeds=(seeds - 1) * fair_run)
  runs = (seeds + len(probes) + sweep_runs + edge_runs + seeds - 1
          + ((lrs + edge) + seeds - 1) * fair)
  out['fewshot'] = runs * FEWSHOT_S
  return out


def full_rate(rates: Rates, arch: str, aug: str, size: int = 0) -> float:
  """Seconds per step of a full-data arm: the 56px hybrid's measured step; the 28px arms their
  1% step (the same model and batch); ResNet-18 the ResNet's by its FLOPs (x (size/28)^2); the
  strong augmentation a 28px hybrid's strong/plain ratio (as measured at 1%)."""
  strong = rates.step['hybrid', 'strong'] / rates.step['hybrid', 'plain'] if aug == 'strong' else 1.
  if arch == 'hybrid56':
    return rates.full * strong
  if arch == 'resnet18':
    return (rates.step['ResNet', aug == 'strong' and 'strong' or 'plain']
            * RESNET18_FLOPS / rates.resnet_flops * ((size or 28) / 28)**2)
  return rates.step[{'hybrid28': 'hybrid', 'swin28': 'Swin'}[arch], 'plain'] * strong


def full_seconds(opts: Mapping[str, str], rates: Rates) -> Dict[str, float]:
  """The full-data part's stages (s): the arm x augmentation screen at the first epoch count,
  the longer epoch counts of the best arm and ResNet-18's epoch counts (the costliest arm and
  augmentation: an upper bound), then the seeds of each on all of train and the students."""
  batch = config_lib.load_config_module(round4.FULL_CONFIG).get_config('').batch
  archs, augs = opts['full_archs'].split('+'), opts['full_augs'].split('+')
  epochs = [int(e) for e in opts['full_epochs'].split('+')]
  seeds = int(opts['seeds'])
  val_steps = lambda e: e * (TRAIN_IMAGES - VAL_IMAGES) / batch  # noqa: E731
  size = max(int(round4.FULL_SIZES[a]) for a in archs)
  top = max(full_rate(rates, a, g) for a in archs for g in augs)
  top_aug = max(augs, key=lambda g: full_rate(rates, 'resnet18', g, size))
  r18 = full_rate(rates, 'resnet18', top_aug, size)
  return dict(
      full_screen=sum(full_rate(rates, a, g) * val_steps(epochs[0]) for a in archs for g in augs),
      full_epochs=sum(top * val_steps(e) for e in epochs[1:]),
      full_resnet18_epochs=sum(r18 * val_steps(e) for e in epochs),
      full_seeds=seeds * max(epochs) * TRAIN_IMAGES / batch * (top + r18),
      # A student step: its own plus the ResNet-18 teacher's forward (a third of its step).
      full_students=seeds * max(epochs) * TRAIN_IMAGES / batch * (top + r18 / 3))


def estimate_seconds(arg: str, rates: Optional[Rates] = None) -> Dict[str, float]:
  """Run time (s) of each stage of `get_grid(arg)`'s parts, before any run."""
  opts, _ = round4.parse(arg)
  rates = rates or measured_rates()
  parts = opts['parts'].split('+')
  out = combined_seconds(opts, rates) if 'combined' in parts else {}
  if 'full' in parts:
    out.update(full_seconds(opts, rates))
  return out


def print_table(arg: str, rates: Optional[Rates] = None) -> None:
  """The estimate as a markdown table (hours per stage and in all)."""
  stages = estimate_seconds(arg, rates)
  print('| stage | hours |\n| --- | --- |')
  for stage, seconds in stages.items():
    print(f'| {stage} | {seconds / HOURS:.2f} |')
  print(f'| all | {sum(stages.values()) / HOURS:.2f} |')


def rates_json(rates: Optional[Rates] = None) -> str:
  """The measured rates, for the page (seconds per step; the teacher's per step)."""
  rates = rates or measured_rates()
  return json.dumps({f'{m} {r}': round(v, 3) for (m, r), v in sorted(rates.step.items())}
                    | dict(teacher=round(rates.teacher, 3), full_hybrid56=round(rates.full, 3)))
