r"""The results table of docs/self_supervised.md, from the measurement's results files.

  python -m research.self_supervised.report --results=docs/self_supervised/results
  python -m research.self_supervised.report --results=docs/self_supervised/results \
      --doc=docs/self_supervised.md   # Writes the tables between its ssl markers.

Prints markdown: test accuracy after fine-tuning on 1%, 5% and 100% of the labels (the
small-data study's slices, seed 0) from each start, and the few-shot linear accuracy of each
encoder; then, at 1% and 5%, each start over the study's three slices (seeds 0-2): the mean
with its 95% t-interval, and its difference from scratch paired by slice, with its interval and
the verdict that interval supports (`research.small_data.report.verdict`); then the one-hour
recipe (configs/fashion_mnist_ssl.py) per method: each stage's steps and wall time, the
command's, and the test accuracy. A cell without a results file reads "not run". The
from-scratch cells at 1% and 5% come from the study's round 2 (`--study_results`, runs
vit_p1_s0_p4 and vit_p5_s0_p4: the same command without `pretrained_path`) when this
measurement has no run of its own for them.
"""

import datetime
import glob
import json
import os
from typing import Any, Dict, List, Optional, Sequence

from absl import app
from absl import flags

from research.self_supervised.naming import finetune_name
from research.small_data import report as study_report

_RESULTS = flags.DEFINE_string('results', 'docs/self_supervised/results', 'NAME.json files.')
_STUDY = flags.DEFINE_string('study_results', 'docs/study/results.jsonl',
                             "The small-data study's results (scratch cells).")
_DOC = flags.DEFINE_string('doc', '', 'Write the tables between the ssl markers of this page '
                           'instead of printing them.')
DOC_MARKER = 'ssl'  # <!-- ssl:begin --> ... <!-- ssl:end --> in docs/self_supervised.md.

PCTS = ('1', '5', '100')
STARTS = (('MAE encoder', 'mae', 'fewshot_mae'), ('MPP encoder', 'mpp', 'fewshot_mpp'),
          ('scratch (random init)', 'scratch', 'fewshot_random'),
          ('supervised encoder (all 54k labels)', 'sup', 'fewshot_sup'))
STUDY_SCRATCH = {'1': 'vit_p1_s0_p4', '5': 'vit_p5_s0_p4'}
SLICES = (0, 1, 2)  # The study's slices (seeds) at 1% and 5%.


def load(results: str, name: str) -> Optional[Dict[str, Any]]:
  path = os.path.join(results, f'{name}.json')
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return json.load(f)


def study_runs(path: str) -> Dict[str, Dict[str, Any]]:
  if not os.path.isfile(path):
    return {}
  with open(path) as f:
    return {r['name']: r for r in map(json.loads, filter(str.strip, f))}


def slice_accuracy(results: str, start: str, pct: str, seed: int,
                   study: Dict[str, Any]) -> Optional[float]:
  """Test accuracy (points) of `start` fine-tuned on slice `seed` of `pct`%, None if not run;
  scratch on slice 0 is the study's round-2 run when this measurement has none."""
  record = load(results, finetune_name(start, pct, seed))
  if record:
    return 100 * record['final']['accuracy_test']
  if (start, seed) == ('scratch', 0) and STUDY_SCRATCH.get(pct) in study:
    return 100 * study[STUDY_SCRATCH[pct]]['accuracy_test']
  return None


def _interval(values: Sequence[float], signed: bool = False) -> str:
  mean, low, high = study_report.t_interval(values)
  fmt = '{:+.2f}' if signed else '{:.2f}'
  return f'{fmt.format(mean)} [{fmt.format(low)}, {fmt.format(high)}]'


def slices_table(results: str, study_path: str) -> str:
  """Each start at 1% and 5% over the three slices: mean [95% interval], and minus scratch
  paired by slice [interval] with its verdict; 'n of 3 slices run' until all three are in."""
  study = study_runs(study_path)
  lines = ['| start of fine-tuning | 1%: mean of 3 slices [95% CI] | 1%: − scratch, paired '
           '[95% CI] | 5%: mean of 3 slices [95% CI] | 5%: − scratch, paired [95% CI] |',
           '| --- | --- | --- | --- | --- |']
  for label, start, _ in STARTS:
    cells: List[str] = []
    for pct in ('1', '5'):
      accs = [slice_accuracy(results, start, pct, s, study) for s in SLICES]
      scratch = [slice_accuracy(results, 'scratch', pct, s, study) for s in SLICES]
      run = [a for a in accs if a is not None]
      if len(run) < len(SLICES):
        cells += [f'{len(run)} of {len(SLICES)} slices run'] * 2
        continue
      cells.append(_interval(run))
      if start == 'scratch':
        cells.append('–')
      elif None in scratch:
        cells.append('scratch not run on every slice')
      else:
        diffs = [a - b for a, b in zip(accs, scratch)]
        cells.append(f'{_interval(diffs, signed=True)}: gain '
                     f'{study_report.verdict(diffs, "greater")}')
    lines.append(f"| {label} | {' | '.join(cells)} |")
  return '\n'.join(lines)


def finetune_cell(results: str, start: str, pct: str, study: Dict[str, Any]) -> str:
  """'82.31% (1000 steps, 9m12s)', a study run's accuracy (named), or 'not run'."""
  if (start, pct) == ('sup', '100'):
    return 'the encoder itself (scratch, 100%)'
  record = load(results, finetune_name(start, pct))
  if record:
    final = record['final']
    return (f"{100 * final['accuracy_test']:.2f}% ({final['step']} steps, "
            f"{_minutes(record['wall_s'])})")
  if start == 'scratch' and STUDY_SCRATCH.get(pct) in study:
    run = study[STUDY_SCRATCH[pct]]
    return (f"{100 * run['accuracy_test']:.2f}% ({run['steps']} steps, "
            f"{_minutes(run['wall_s'])}; study round 2, {run['name']})")
  return 'not run'


def pretraining_record(results: str, start: str) -> Optional[Dict[str, Any]]:
  """measure.py's stage-1 run of 'mae' or 'mpp' (named METHOD_eEPOCHS there), if any."""
  paths = sorted(glob.glob(os.path.join(results, f'{start}_e*.json')))
  if start not in ('mae', 'mpp') or not paths:
    return None
  with open(paths[-1]) as f:
    return json.load(f)


def fewshot_cell(results: str, name: str) -> str:
  record = load(results, name)
  if not record:
    return 'not run'
  return ' / '.join(f"{100 * r['mean']:.2f}" for r in record['fewshot']['results'])


def _minutes(seconds: float) -> str:
  return f'{int(seconds // 60)}m{int(seconds % 60):02d}s'


def table(results: str, study_path: str) -> str:
  study = study_runs(study_path)
  lines = ['| start of fine-tuning | 1% labels (600 images) | 5% (3,000) | 100% (54,000) | '
           'few-shot linear, 1/5/10/25 shots |', '| --- | --- | --- | --- | --- |']
  for label, start, fewshot_name in STARTS:
    pretraining = pretraining_record(results, start)
    if pretraining:
      label += f" ({pretraining['final']['step']} pretraining steps of batch 256)"
    cells = [finetune_cell(results, start, pct, study) for pct in PCTS]
    lines.append(f"| {label} | {' | '.join(cells)} | {fewshot_cell(results, fewshot_name)} |")
  return '\n'.join(lines)


def _utc_seconds(stamp: str) -> float:
  return datetime.datetime.fromisoformat(stamp.replace('Z', '+00:00')).timestamp()


def recipe_table(results: str) -> str:
  """configs/fashion_mnist_ssl.py's two stages per method (measure.py's recipe_METHOD): each
  stage's steps and wall time (stage 1 from its start to stage 2's, stage 2 to the end), the
  whole command's wall time and the fine-tuned model's test accuracy."""
  lines = ['| recipe | stage 1: pretraining, no labels | stage 2: fine-tuning, 60k labels | '
           'whole command | test accuracy |', '| --- | --- | --- | --- | --- |']
  for method in ('mae', 'mpp'):
    label = f'`configs/fashion_mnist_ssl.py:{method}`'
    record = load(results, f'recipe_{method}')
    if not record:
      lines.append(f'| {label} | not run | not run | not run | not run |')
      continue
    stages = record['stages']
    pre_start, fine_start = (_utc_seconds(stages[s]['started']) for s in ('pretrain', 'finetune'))
    cells = [f"{stages['pretrain']['final']['step']} steps, {_minutes(fine_start - pre_start)}",
             f"{stages['finetune']['final']['step']} steps, "
             f"{_minutes(_utc_seconds(record['finished_utc']) - fine_start)}",
             _minutes(record['wall_s']), f"{100 * record['final']['accuracy_test']:.2f}%"]
    lines.append(f"| {label} | {' | '.join(cells)} |")
  return '\n'.join(lines)


def tables(results: str, study_path: str) -> str:
  """Slice 0's table, the three slices' table and the recipe's, as the page shows them."""
  return (f'{table(results, study_path)}\n\nOn the three slices (seeds 0-2) at 1% and 5%:\n\n'
          f'{slices_table(results, study_path)}\n\nThe one-hour recipe, both stages as its '
          f'docstring runs them (batch 256):\n\n{recipe_table(results)}\n')


def main(argv):
  del argv
  text = tables(_RESULTS.value, _STUDY.value)
  if _DOC.value:
    study_report.write_into_doc(_DOC.value, text, DOC_MARKER)
  else:
    print(text, end='')


if __name__ == '__main__':
  app.run(main)
