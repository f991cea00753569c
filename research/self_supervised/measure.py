r"""The Fashion-MNIST measurements of docs/self_supervised.md, run one after another, resumably.

  nice -n 5 python -m research.self_supervised.measure --out=runs/ssl \
      --results=docs/self_supervised/results

Each step is one exact command (pretraining `configs/fashion_mnist_ssl.py:METHOD,stage1`,
fine-tuning `configs/study_fashion_mnist.py:model=vit4,...` on the small-data study's slices
from an encoder, or `vit_jax.fewshot` on an encoder). A step whose results file exists is
skipped, so a killed measurement continues where it stopped (an unfinished run resumes from
its workdir). Each results file holds the command, its start and end (UTC), its wall time, the
machine and what the run reported last (eval metrics of the final step, or fewshot's JSON).
A failed step is reported and the next one runs. `--only=NAME+NAME` runs those steps; the
order of `plan()` is the plan (seed 0: 1% first, 100% last; then slices 1 and 2; then the
one-hour recipe of configs/fashion_mnist_ssl.py, both stages as its docstring runs them).
`--out` must hold `data/` (research/small_data/folders.py: Fashion-MNIST as image folders).
"""

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from typing import List, Tuple

from absl import app
from absl import flags

from research.self_supervised import run_summary
from research.self_supervised.naming import finetune_name

_OUT = flags.DEFINE_string('out', 'runs/ssl', 'Run directories (and data/, the study folders).')
_RESULTS = flags.DEFINE_string('results', 'docs/self_supervised/results',
                               'One NAME.json per finished step.')
_ONLY = flags.DEFINE_string('only', '', 'NAME+NAME: run only these steps.')
_MACHINE = flags.DEFINE_string('machine', '2 vCPUs, shared, no GPU', 'Written in each result.')

MAIN = ('python', '-m', 'vit_jax.main')
STUDY = 'configs/study_fashion_mnist.py:model=vit4,seed={seed},root={{out}}/data'
STEPS = {'1': 1000, '5': 1500, '100': 1000}  # The study's steps per data fraction (round 2).
PRETRAIN = {  # Shortened from the recipe's 30 epochs to fit the session (docs: Results).
    'mae': ('--config.num_epochs=4', '--config.warmup_steps=60'),
    'mpp': ('--config.num_epochs=1', '--config.warmup_steps=25'),
}
ENCODERS = {'mae': 'mae_e4', 'mpp': 'mpp_e1', 'sup': 'scratch_p100'}
STARTS = ('mae', 'mpp', 'sup', 'scratch')  # 'scratch': no pretrained_path.
SEEDS = (1, 2)  # The study's other slices at 1% and 5% (seed 0's cells are the plan's first).


def pretrain(method: str) -> Tuple[str, ...]:
  return (*MAIN, f'--config=configs/fashion_mnist_ssl.py:{method},stage1', *PRETRAIN[method],
          '--config.eval_every=0', '--config.checkpoint_every=250',
          f'--workdir={{out}}/{ENCODERS[method]}')


def finetune(name: str, pct: str, encoder: str = '', seed: int = 0) -> Tuple[str, ...]:
  start = (f'--config.pretrained_path={{out}}/{ENCODERS[encoder]}',) if encoder else ()
  return (*MAIN, f'--config={STUDY.format(seed=seed)},pct={pct},steps={STEPS[pct]}', *start,
          f'--workdir={{out}}/{name}')


def other_slices() -> List[Tuple[str, Tuple[str, ...]]]:
  """Every start on the study's slices 1 and 2 at 1%, then at 5% (seed 0 is the plan's own)."""
  steps = []
  for pct in ('1', '5'):
    for seed in SEEDS:
      for start in STARTS:
        name = finetune_name(start, pct, seed)
        steps.append((name, finetune(name, pct, '' if start == 'scratch' else start, seed)))
  return steps


def fewshot(encoder: str) -> Tuple[str, ...]:
  source = ('--checkpoint={out}/mae_e4', '--random_init_seed=0') if encoder == 'random' else (
      f'--checkpoint={{out}}/{ENCODERS[encoder]}',)
  return ('python', '-m', 'vit_jax.fewshot', *source, '--dataset=fashion_mnist',
          '--shots=1,5,10,25', '--train_split=train[:10000]', '--json')


def plan() -> List[Tuple[str, Tuple[str, ...]]]:
  """(name, argv) in the order they run: every 1% cell first, 100% last."""
  return [
      ('mae_e4', pretrain('mae')), ('ft_mae_p1', finetune('ft_mae_p1', '1', 'mae')),
      ('fewshot_mae', fewshot('mae')), ('fewshot_random', fewshot('random')),
      ('mpp_e1', pretrain('mpp')), ('ft_mpp_p1', finetune('ft_mpp_p1', '1', 'mpp')),
      ('fewshot_mpp', fewshot('mpp')),
      ('scratch_p100', finetune('scratch_p100', '100')),
      ('ft_sup_p1', finetune('ft_sup_p1', '1', 'sup')), ('fewshot_sup', fewshot('sup')),
      ('ft_mae_p5', finetune('ft_mae_p5', '5', 'mae')),
      ('ft_mpp_p5', finetune('ft_mpp_p5', '5', 'mpp')),
      ('ft_sup_p5', finetune('ft_sup_p5', '5', 'sup')),
      ('ft_mae_p100', finetune('ft_mae_p100', '100', 'mae')),
      ('ft_mpp_p100', finetune('ft_mpp_p100', '100', 'mpp')),
      *other_slices(),
      ('recipe_mae', recipe('mae')),
  ]


def recipe(method: str) -> Tuple[str, ...]:
  """The Fashion-MNIST recipe as its docstring prints it: both stages, nothing overridden."""
  return (*MAIN, f'--config=configs/fashion_mnist_ssl.py:{method}',
          f'--workdir={{out}}/recipe_{method}')


def run_step(name: str, argv: Tuple[str, ...], out: str, results: str) -> int:
  """Runs one step (stdout/stderr to OUT/NAME.log) and writes RESULTS/NAME.json if it ends well."""
  argv = tuple(a.format(out=out) for a in argv)
  started = time.time()
  with open(os.path.join(out, f'{name}.log'), 'a') as log:
    proc = subprocess.run((sys.executable, *argv[1:]), stdout=subprocess.PIPE, stderr=log,
                          text=True, check=False)
    log.write(proc.stdout)
  wall = time.time() - started
  if proc.returncode:
    print(f'{name}: exit {proc.returncode} after {wall:.0f} s (see {out}/{name}.log)', flush=True)
    return proc.returncode
  record = dict(name=name, command=shlex.join(argv), machine=_MACHINE.value,
                started_utc=_utc(started), finished_utc=_utc(started + wall),
                wall_s=round(wall, 1), python=platform.python_version())
  if 'vit_jax.fewshot' in argv:
    record['fewshot'] = json.loads(proc.stdout[proc.stdout.index('{'):])
  else:
    record.update(run_summary.summary(os.path.join(out, name)))
  with open(os.path.join(results, f'{name}.json'), 'w') as f:
    json.dump(record, f, indent=1)
  print(f'{name}: done in {wall:.0f} s', flush=True)
  return 0


def _utc(seconds: float) -> str:
  return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(seconds))


def main(argv):
  del argv
  only = set(_ONLY.value.split('+')) if _ONLY.value else None
  os.makedirs(_RESULTS.value, exist_ok=True)
  failed = []  # A failed step is reported and skipped: the steps after it still run.
  for name, step_argv in plan():
    if (only and name not in only) or os.path.exists(os.path.join(_RESULTS.value, f'{name}.json')):
      continue
    if run_step(name, step_argv, _OUT.value, _RESULTS.value):
      failed.append(name)
  if failed:
    print(f'failed: {" ".join(failed)}', flush=True)
  return 1 if failed else 0


if __name__ == '__main__':
  app.run(main)
