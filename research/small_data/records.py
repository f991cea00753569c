"""What a run directory records, and the results file: one JSON line per run of a grid.

`study.json` in each run directory keeps every attempt (start, wall time, exit code; an attempt
killed with its runner, as when a session ends, is timed to the last file it wrote); `run_record`
turns a finished run directory into its results line (tags, exact command, accuracies, steps,
images seen, forward and training FLOPs, wall time), so the report needs only the results file.
"""

import functools
import hashlib
import json
import os
import re
import shlex
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

from research.small_data import grid as grid_lib


STATE_FILE = 'study.json'
RESULTS_FILE = 'results.jsonl'
FEWSHOT_FILE = 'fewshot.json'


def is_finished(workdir: str) -> bool:
  """A run that exported its params (train.py writes metadata.json last)."""
  return all(os.path.isfile(os.path.join(workdir, f)) for f in ('params.npz', 'metadata.json'))


def params_sha256(workdir: str) -> str:
  """The SHA-256 of a finished run's params.npz: which instance of a run a record describes
  (a run made again on another machine is a new instance: its floating-point results differ)."""
  digest = hashlib.sha256()
  with open(os.path.join(workdir, 'params.npz'), 'rb') as f:
    for block in iter(lambda: f.read(1 << 20), b''):
      digest.update(block)
  return digest.hexdigest()


def read_fewshot(workdir: str) -> Optional[Dict[str, Any]]:
  """The run's few-shot measurement (`vit_jax.fewshot --json` and its `command`), if it has one
  of its current params: one older than params.npz (the run made again since) does not count."""
  path = os.path.join(workdir, FEWSHOT_FILE)
  params = os.path.join(workdir, 'params.npz')
  if not (os.path.isfile(path) and os.path.isfile(params)):
    return None
  if os.path.getmtime(path) < os.path.getmtime(params):
    return None
  with open(path) as f:
    return json.load(f)


def write_fewshot(workdir: str, doc: Mapping[str, Any]) -> None:
  _write_json(workdir, FEWSHOT_FILE, doc)


def read_state(workdir: str) -> Dict[str, Any]:
  path = os.path.join(workdir, STATE_FILE)
  if not os.path.isfile(path):
    return {'attempts': []}
  with open(path) as f:
    return json.load(f)


def _utc(seconds: float) -> str:
  return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(seconds))


def _write_json(workdir: str, name: str, doc: Mapping[str, Any]) -> None:
  """`workdir/name` replaced whole (a reader never sees half a file)."""
  tmp = os.path.join(workdir, f'{name}.tmp')
  with open(tmp, 'w') as f:
    json.dump(doc, f, indent=1)
  os.replace(tmp, os.path.join(workdir, name))


def _write_state(workdir: str, state: Dict[str, Any]) -> None:
  _write_json(workdir, STATE_FILE, state)


def last_write(workdir: str) -> Optional[float]:
  """When the run last wrote a file in `workdir` (its own study.json aside), if it wrote one."""
  times = [os.path.getmtime(os.path.join(root, name))
           for root, _, names in os.walk(workdir) for name in names
           if not name.startswith(STATE_FILE)]
  return max(times, default=None)


def attempt_wall(attempt: Mapping[str, Any], workdir: str) -> float:
  """Seconds of one attempt: as recorded when it ended, else (killed with its runner) from its
  start to the last file it wrote."""
  if 'wall_s' in attempt:
    return float(attempt['wall_s'])
  last = last_write(workdir)
  return max(0., last - attempt['started_s']) if last is not None else 0.


def begin_attempt(workdir: str, command: str) -> None:
  """Appends an attempt that has started to `workdir/study.json`: if the runner is killed
  before `end_attempt`, the attempt and its time still count (`attempt_wall`)."""
  state = read_state(workdir)
  for attempt in state['attempts']:  # An earlier attempt killed with its runner.
    if 'wall_s' not in attempt:
      attempt.update(wall_s=round(attempt_wall(attempt, workdir), 2), returncode=None,
                     ended='killed with its runner: timed to the last file it wrote')
  state['command'] = command
  now = time.time()
  state['attempts'].append({'started_at': _utc(now), 'started_s': round(now, 2)})
  _write_state(workdir, state)


def end_attempt(workdir: str, wall_s: float, returncode: int) -> None:
  """Closes the attempt `begin_attempt` opened: its end, wall seconds and exit code."""
  state = read_state(workdir)
  state['attempts'][-1].update(finished_at=_utc(time.time()), wall_s=round(wall_s, 2),
                               returncode=returncode)
  _write_state(workdir, state)


def load_code() -> None:
  """Imports now what recording a finished run will need (the FLOPs counter with every family's
  model, shape reader and counter, the metadata and curve readers), which are otherwise
  imported when the first run finishes.

  The runner calls it at its start, so it holds one version of the code: a change on disk while
  it runs (a commit, a checkout) takes effect at its next start instead of mixing a module it
  imported before the change with one imported after (a name missing at record time). Each run
  is a subprocess of its own and starts on the code on disk then.
  """
  from vit_jax import families
  from vit_jax.tools import flops  # noqa: F401
  from vit_jax.training import plotting  # noqa: F401
  from vit_jax.weights import metadata  # noqa: F401
  for record in families.FAMILIES.values():
    for dotted in (record.module, record.shape_reader, record.flops):
      if dotted:
        families.resolve(dotted)


TRAIN_FLOPS_FACTOR = 3  # A training step ≈ forward + backward (2x forward) per image.


@functools.lru_cache(maxsize=None)
def _forward_flops(model_json: str, image_size: int, num_classes: int) -> Tuple[float, str]:
  from vit_jax.tools import flops  # Lazily: only records of finished runs need it.
  model = json.loads(model_json)
  try:
    return float(flops.count_flops(model, image_size, num_classes)['total']), 'vit_jax.flops'
  except ValueError:  # ResNet and Mixer: XLA's count of the compiled forward pass.
    return flops.xla_flops(model, image_size, num_classes), 'xla cost analysis'


def forward_flops(meta: Mapping[str, Any]) -> Tuple[float, str]:
  """Forward FLOPs per image of the model a metadata.json describes, and what counted them:
  `vit_jax.flops.count_flops` for ViT, hybrid and Swin, XLA's cost analysis for the ResNet."""
  return _forward_flops(json.dumps(meta['model'], sort_keys=True), int(meta['image_size']),
                        int(meta['num_classes']))


def _read_metadata(npz_path_or_dir: str) -> Optional[Dict[str, Any]]:
  """A run's metadata.json as the package reads it (its model always declares `family`)."""
  from vit_jax.weights import metadata  # Lazily, as `_forward_flops`.
  return metadata.read_metadata(npz_path_or_dir)


def teacher_path(command: str) -> Optional[str]:
  """The `--config.distill.teacher_path=` of `command`, if any."""
  match = re.search(r'--config\.distill\.teacher_path=(\S+)', command)
  return match.group(1) if match else None


def teacher_metadata(command: str) -> Optional[Dict[str, Any]]:
  """The metadata.json beside the `--config.distill.teacher_path=` of `command`, if any."""
  path = teacher_path(command)
  return _read_metadata(path) if path else None


def teacher_instance(command: str, meta: Mapping[str, Any]) -> Dict[str, Any]:
  """The teacher a distilled run learned from (`meta`: its `teacher_metadata`), as it was when
  the run was recorded: its params' SHA-256 and its accuracies (a teacher made again is another
  instance; its student is paired with the one it learned from)."""
  return dict(params_sha256=params_sha256(os.path.dirname(teacher_path(command))),
              accuracy_val=meta.get('accuracy_val'), accuracy_test=meta.get('accuracy'))


def record_command(run: grid_lib.Run, out: str) -> str:
  """The command a results line shows for `run`: `python`, not this interpreter's path."""
  return shlex.join(grid_lib.command_argv(run, out, python='python'))


def run_record(run: grid_lib.Run, out: str) -> Dict[str, Any]:
  """One results line of `run` from its run directory: its exact command, wall time (all
  attempts), and once finished train/val/test accuracy, steps, images seen and compute.

  Compute: `train_flops` = 3 x forward FLOPs per image x images seen (steps x batch), plus one
  teacher forward per image when distilling; evaluation is not counted. A label-free
  pretraining run (its metadata's `self_supervised`) has no accuracies and no training
  FLOPs: its method's test loss is `loss_test`; a run fine-tuned from it counts its own steps
  only. With a few-shot measurement of its params (`read_fewshot`): `fewshot_<k>shot` and
  `fewshot_command`.
  """
  workdir = os.path.join(out, run.name)
  attempts = read_state(workdir)['attempts']
  command = record_command(run, out)
  record = dict(name=run.name, tags=dict(run.tags), command=command,
                finished=is_finished(workdir), attempts=len(attempts),
                wall_s=round(sum(attempt_wall(a, workdir) for a in attempts), 1))
  meta = _read_metadata(workdir) if record['finished'] else None
  if meta is None:
    return record
  steps, batch = int(meta['step']), meta.get('batch')  # Runs before round 2 lack the batch.
  flops, source = forward_flops(meta)
  teacher = teacher_metadata(command)
  teacher_flops = forward_flops(teacher)[0] if teacher else 0.
  images = steps * int(batch) if batch else None
  record.update(
      steps=steps, batch=batch, images_seen=images,
      accuracy_train=meta.get('accuracy_train'), accuracy_val=meta.get('accuracy_val'),
      accuracy_test=meta.get('accuracy'), num_examples_train=meta.get('num_examples_train'),
      num_examples_val=meta.get('num_examples_val'), num_examples_test=meta.get('num_examples'),
      forward_flops=flops, flops_source=source, teacher_forward_flops=teacher_flops,
      train_flops=(TRAIN_FLOPS_FACTOR * flops + teacher_flops) * images if images else None)
  if meta.get('self_supervised'):  # Not counted: its encoder may see a part of the tokens
    # (MAE: a quarter) and a decoder or prediction head runs beside it.
    record.update(loss_test=meta['self_supervised'].get('loss_test'), train_flops=None)
  record['params_sha256'] = params_sha256(workdir)
  if teacher:
    record['teacher'] = teacher_instance(command, teacher)
  curve = val_curve(workdir)
  if curve:
    record['val_curve'] = curve
  fewshot = read_fewshot(workdir)
  if fewshot:
    record['fewshot_command'] = fewshot['command']
    record.update({f'fewshot_{r["shots"]}shot': r['mean'] for r in fewshot['results']})
  return record


def val_curve(workdir: str) -> List[List[float]]:
  """[[step, validation accuracy], ...] of a run's evaluations (its metrics.jsonl), or [].

  Kept in the results line so budgets read off a probe's curve need no run directory.
  """
  from vit_jax.training import plotting  # Lazily, as the FLOPs count.
  path = os.path.join(workdir, 'metrics.jsonl')
  if not os.path.isfile(path):
    return []
  series = plotting.read_history(path).get('accuracy_val', {})
  return [[int(step), round(float(acc), 6)] for step, acc in sorted(series.items())]


def read_results(path: str) -> Dict[str, Dict[str, Any]]:
  """{run name: record} of a results file (one JSON object a line); {} when there is none."""
  if not path or not os.path.isfile(path):
    return {}
  records = {}
  with open(path) as f:
    for number, line in enumerate(f, 1):
      if line.strip():
        try:
          record = json.loads(line)
        except json.JSONDecodeError as e:
          raise ValueError(f'{path}:{number} is not a JSON line ({e.msg}); fix or delete '
                           'it (rerunning the grid rewrites it from its run directory).') from None
        records[record['name']] = record
  return records


INSTANCE_FIELDS = ('accuracy_train', 'accuracy_val', 'accuracy_test', 'loss_test')


def same_instance(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
  """Whether two finished records of one command describe the same params: by their SHA-256,
  or, for a record written before it was kept, by the accuracies and loss its export wrote."""
  if 'params_sha256' in old:
    return old['params_sha256'] == new.get('params_sha256')
  return all(old.get(k) == new.get(k) for k in INSTANCE_FIELDS)


def _with_instance(remade: List[Dict[str, Any]], record: Mapping[str, Any]
                   ) -> List[Dict[str, Any]]:
  """`remade` with `record`'s instance (its SHA-256, accuracies, few-shot and wall time) added
  or brought up to date."""
  keep = ('params_sha256', 'wall_s') + INSTANCE_FIELDS
  instance = {k: v for k, v in record.items() if k in keep or k.startswith('fewshot_')}
  instance.pop('fewshot_command', None)
  return [r for r in remade if r.get('params_sha256') != instance['params_sha256']] + [instance]


def update_results(path: str, grid: grid_lib.Grid, out: str) -> Dict[str, Dict[str, Any]]:
  """Rewrites the results file: a record for every run with a directory under `out`, and the
  file's other records kept (runs made elsewhere), in the grid's order; returns them all.

  A finished record is not replaced by an unfinished one (a teacher being made again here), nor
  by another instance of the same command (`same_instance`): the record stays the run its
  tables and earlier students used, and the instance made again is listed in its `remade`.
  """
  records = read_results(path)
  for run in grid.runs:
    if os.path.isdir(os.path.join(out, run.name)):
      record, old = run_record(run, out), records.get(run.name, {})
      if old.get('finished') and not record['finished']:
        continue
      if not old.get('finished') or old.get('command') != record['command']:
        records[run.name] = record
      elif same_instance(old, record):
        records[run.name] = dict(record, **{k: old[k] for k in ('remade',) if k in old})
      else:
        records[run.name] = dict(old, remade=_with_instance(old.get('remade', []), record))
  if not records:
    return {}
  order = {run.name: i for i, run in enumerate(grid.runs)}
  ordered = sorted(records.values(), key=lambda r: order.get(r['name'], len(order)))
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  # A temporary file per process: the runner and a `--report` run beside it both rewrite the
  # file (each from the run directories, so the last one is whole and current).
  tmp = f'{path}.{os.getpid()}.tmp'
  with open(tmp, 'w') as f:
    f.writelines(json.dumps(r, sort_keys=True) + '\n' for r in ordered)
  os.replace(tmp, path)
  return {r['name']: r for r in ordered}
