"""The quickstart's stage-1 training speed: this checkout against a reference commit, interleaved.

Runs stage 1 of the README's first command (`configs/fashion_mnist_quickstart.py`,
`config.pretrain`: the 0.54M-parameter ViT at 28px, batch 128, Fashion-MNIST, AdamW) for
`--steps` steps with this checkout's code and with the code of `--ref` (a commit, extracted with
`git archive` into a temporary folder: the checkout is not touched; or `--ref_tree`, a folder),
both with this venv. Each run is its own process, started with huge pages for malloc as
`scripts/quickstart.sh` starts training; the two alternate (ref, ours, then ours, ref, ...) for
`--rounds` rounds, so drift on a shared machine falls on both. A run's speed is the median
img/s/core of its progress intervals (every 50 steps, as the quickstart logs) after the first,
which holds the compile. Printed: each run, the ratio ours / ref per round, and their median and
range: a ratio, not an absolute time (the machine is shared and its speed drifts).

  python benchmarks/quickstart_steps.py --ref=cf53129 --steps=400 --rounds=4
"""

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

from absl import app
from absl import flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join('configs', 'fashion_mnist_quickstart.py')
_RESULT = 'QUICKSTART_STEPS_RESULT '

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Defines the script's flags, when it runs.

  Not at import: absl flags are global, and the tests import this module beside the tools
  (the fewshot tool's --tfds_data_dir would clash).
  """
  flags.DEFINE_string('ref', 'cf53129', 'The reference commit (git archive of it).')
  flags.DEFINE_string('ref_tree', None, 'A folder holding the reference code (vit_jax/ and '
                      'configs/) instead of --ref.')
  flags.DEFINE_string('ours', None, 'A commit to time as ours instead of the working tree.')
  flags.DEFINE_integer('steps', 400, 'Stage-1 steps per run.')
  flags.DEFINE_integer('rounds', 4, 'Runs of each tree, alternating.')
  flags.DEFINE_string('tfds_data_dir', None, 'TFDS data dir (default: TFDS\'s, as the '
                      'quickstart).')
  flags.DEFINE_string('worker_tree', None, 'Internal: run stage 1 once with the code of this '
                      'folder (on PYTHONPATH) and print the result.')
  flags.DEFINE_string('run_dir', None, 'Internal: the worker\'s run directory.')


def stage1_config(tree: str, steps: int, overrides: Optional[Dict[str, Any]] = None,
                  arg: str = '') -> Any:
  """`tree`'s quickstart stage-1 config, shortened to `steps` (final eval on 1,000 images);
  `arg` is the config's (e.g. 'runlocal')."""
  spec = importlib.util.spec_from_file_location('quickstart_config', os.path.join(tree, CONFIG))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config(arg).pretrain
  with config.unlocked():
    config.update(dict(total_steps=steps, checkpoint_every=0))
    config.pp.test = 'test[:1000]'
    for key, value in (overrides or {}).items():
      parent, _, name = key.rpartition('.')
      (config[parent] if parent else config)[name] = value
  return config


def run_stage1(config: Any, workdir: str,
               train_and_evaluate: Optional[Callable[[Any, str], Any]] = None) -> Dict[str, Any]:
  """Trains `config` in `workdir` (default: `vit_jax.train`'s function, from the tree on
  PYTHONPATH); the figures of its progress intervals, read from its metrics.jsonl, and (with
  the default function) the process's CPU seconds (all threads) at each progress line."""
  cpu = []
  if train_and_evaluate is None:
    from vit_jax import train  # noqa: PLC0415  # The worker's tree.
    from vit_jax.training import progress  # noqa: PLC0415
    log_interval = progress.ProgressLog.train

    def timed_log_interval(self, step, *args, **kwargs):
      cpu.append(time.process_time())
      return log_interval(self, step, *args, **kwargs)

    progress.ProgressLog.train = timed_log_interval
    train_and_evaluate = train.train_and_evaluate
  train_and_evaluate(config, workdir)
  rows = []
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    for line in f:
      row = json.loads(line)
      if 'img_sec_core_train' in row:
        rows.append(row)
  steps = [r['step'] for r in rows]
  # CPU ms per image of each interval after the first (as the rates), when it was measured.
  cpu_ms = [1e3 * (cpu[i] - cpu[i - 1]) / (config.batch * (steps[i] - steps[i - 1]))
            for i in range(1, min(len(cpu), len(steps)))]
  return {'steps': steps, 'img_s_core': [r['img_sec_core_train'] for r in rows],
          'data_wait': [r.get('data_wait_fraction', 0.) for r in rows], 'cpu_ms_per_img': cpu_ms}


def speed(result: Dict[str, Any]) -> float:
  """Median img/s/core of a run's intervals after the first (which holds the compile)."""
  rates = result['img_s_core'][1:] or result['img_s_core']
  return statistics.median(rates)


def _extract(ref: str, into: str) -> str:
  """The code of commit `ref` (vit_jax/, configs/) in folder `into`, via `git archive`."""
  archive = subprocess.run(['git', '-C', REPO, 'archive', '--format=tar', ref, 'vit_jax',
                            'configs'], capture_output=True, check=True).stdout
  subprocess.run(['tar', '-x', '-C', into], input=archive, check=True)
  return into


def _run_worker(tree: str, steps: int, scratch: str, name: str) -> Dict[str, Any]:
  workdir = tempfile.mkdtemp(prefix=f'{name}_', dir=scratch)
  command = [os.path.join(REPO, 'scripts', 'hugepages.sh'), sys.executable,
             os.path.abspath(__file__), f'--worker_tree={tree}', f'--run_dir={workdir}',
             f'--steps={steps}']
  if FLAGS.tfds_data_dir:
    command.append(f'--tfds_data_dir={FLAGS.tfds_data_dir}')
  env = dict(os.environ, PYTHONPATH=tree)
  proc = subprocess.run(command, capture_output=True, text=True, env=env)
  lines = [line for line in proc.stdout.splitlines() if line.startswith(_RESULT)]
  if proc.returncode or not lines:
    raise RuntimeError(f'The {name} run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}')
  return json.loads(lines[-1][len(_RESULT):])


def summary(runs: List[Dict[str, Any]]) -> str:
  """The table of runs and the ratio ours / ref per round (img/s/core, and CPU ms per image
  where measured), its median and range."""
  lines = ['| round | tree | img/s/core (median of intervals) | CPU ms/image | data-wait | '
           'intervals |', '|---|---|---|---|---|---|']
  ratios, cpu_ratios = [], []
  for round_index in sorted({r['round'] for r in runs}):
    pair = {r['name']: r for r in runs if r['round'] == round_index}
    for name in ('ref', 'ours'):
      if name in pair:
        r = pair[name]
        cpu = f"{cpu_ms(r):.3f}" if r.get('cpu_ms_per_img') else '-'
        lines.append(f"| {round_index} | {name} | {speed(r):.1f} | {cpu} | "
                     f"{100 * statistics.median(r['data_wait'][1:] or r['data_wait']):.0f}% | "
                     f"{len(r['img_s_core']) - 1} |")
    if len(pair) == 2:
      ratios.append(speed(pair['ours']) / speed(pair['ref']))
      if pair['ours'].get('cpu_ms_per_img') and pair['ref'].get('cpu_ms_per_img'):
        cpu_ratios.append(cpu_ms(pair['ours']) / cpu_ms(pair['ref']))
  for what, values in (('img/s/core', ratios), ('CPU ms per image', cpu_ratios)):
    if values:
      lines.append(f'ours / ref, {what}: median {statistics.median(values):.3f}, range '
                   f'{min(values):.3f}-{max(values):.3f} over {len(values)} rounds '
                   f'({", ".join(f"{x:.3f}" for x in values)})')
  return '\n'.join(lines)


def cpu_ms(result: Dict[str, Any]) -> float:
  """Median CPU ms (all the process's threads) per image over a run's intervals after the first."""
  return statistics.median(result['cpu_ms_per_img'])


def main(argv) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments {argv[1:]}.')
  if FLAGS.worker_tree:
    overrides = {'tfds_data_dir': FLAGS.tfds_data_dir} if FLAGS.tfds_data_dir else None
    config = stage1_config(FLAGS.worker_tree, FLAGS.steps, overrides)
    print(_RESULT + json.dumps(run_stage1(config, FLAGS.run_dir)), flush=True)
    return
  scratch = tempfile.mkdtemp(prefix='quickstart_steps_')
  ref_tree = FLAGS.ref_tree or _extract(FLAGS.ref, tempfile.mkdtemp(dir=scratch))
  ours_tree = _extract(FLAGS.ours, tempfile.mkdtemp(dir=scratch)) if FLAGS.ours else REPO
  print(f'Quickstart stage 1, {FLAGS.steps} steps per run, {FLAGS.rounds} rounds; ref = '
        f'{FLAGS.ref_tree or FLAGS.ref}, ours = {FLAGS.ours or REPO + " (working tree)"}; '
        f'{os.cpu_count()} CPUs', flush=True)
  runs = []
  for round_index in range(FLAGS.rounds):
    order = ('ref', 'ours') if round_index % 2 == 0 else ('ours', 'ref')
    for name in order:
      result = _run_worker(ref_tree if name == 'ref' else ours_tree, FLAGS.steps, scratch, name)
      runs.append(dict(result, name=name, round=round_index))
      cpu = f", {cpu_ms(result):.3f} CPU ms/image" if result['cpu_ms_per_img'] else ''
      print(f'round {round_index} {name}: {speed(result):.1f} img/s/core{cpu}', flush=True)
  print(summary(runs))


if __name__ == '__main__':
  define_flags()
  app.run(main)
