r"""Runs a grid of training runs one by one, resumably; records each in a results file to tabulate.

  python -m vit_jax.study --grid=configs/study_fashion_mnist.py --out=runs/study
  python -m vit_jax.study --grid=configs/study_fashion_mnist.py --out=runs/study \
    --results=docs/study/results.jsonl --report --report_dir=docs/study \
    --doc=docs/small_data_study.md

A grid file (a config file with `get_grid(arg) -> Grid`) lists runs: a name and the exact
`python -m vit_jax.main --config=...` command, with `{out}` standing for `--out` (so a run can
name another's params.npz as its teacher or its pretrained weights; list that one first). Each
run's workdir is `out/<name>`; a run is finished when its `params.npz` and `metadata.json` exist,
and is then skipped. An unfinished one is started again with the same command, which resumes it
from its orbax checkpoint. Every attempt's wall time and exit code go to `out/<name>/study.json`,
its output to `out/<name>/study.log`.

After each run the runner rewrites `--results` (default `out/results.jsonl`): one JSON line per
run (`run_record`: tags, exact command, train / validation / test accuracy, steps, images seen,
forward FLOPs per image and training FLOPs, wall time), records of runs made elsewhere kept. The
report (after running, or `--report` alone) reads only that file, so a committed results file
regenerates the tables and plots without the run directories: a markdown table per `Table` of
the grid (mean ± sample std over the runs of a cell, e.g. over seeds; each cell names its runs),
a line or bar plot and an accuracy-over-compute plot per table (PNG), and a list of every run.
`--doc` replaces the block between `<!-- study:begin -->` and
`<!-- study:end -->` of a markdown file with that report, so the numbers in the write-up are
generated, never typed.

Grids may also need image folders of Fashion-MNIST (class subsets for pretraining on some
classes and fine-tuning on the others): `Grid.folders` names the root that `prepare_folders`
writes once from the local idx files (vit_jax.fashion_mnist), before the first run.
"""

import dataclasses
import functools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from absl import app
from absl import flags

STATE_FILE = 'study.json'
RESULTS_FILE = 'results.jsonl'
LOG_FILE = 'study.log'
DOC_BEGIN, DOC_END = '<!-- study:begin -->', '<!-- study:end -->'
FOLDERS_DONE = 'prepared.json'
FASHION_MNIST_NAME = 'fashion_mnist'


@dataclasses.dataclass(frozen=True)
class Run:
  """One training run: `out/<name>` runs `command` (`{out}` is replaced by the output folder).

  `tags` place it in tables (e.g. model='ViT', pct=1, seed=0).
  """
  name: str
  command: str
  tags: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Table:
  """A table of the report: rows by tag `row`, columns by tag `col`, of the runs matching `where`
  (tag → value, or a tuple of allowed values) that have both tags.

  A cell is the mean ± std of `metric` (a results field: accuracy_test, accuracy_val or
  accuracy_train; in %) over its runs (the seeds).
  """
  name: str
  title: str
  row: str
  col: str
  where: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  col_label: str = ''
  log_x: bool = False
  metric: str = 'accuracy_test'


@dataclasses.dataclass(frozen=True)
class Grid:
  """What a grid file's `get_grid(arg)` returns.

  `folders` (with `{out}`) is where `prepare_folders` writes Fashion-MNIST as image folders
  (None: the grid needs none); `folder_limit` keeps that many images per class and split (0 =
  all; for smoke runs).
  """
  runs: Sequence[Run]
  tables: Sequence[Table] = ()
  folders: Optional[str] = None
  folder_limit: int = 0


def load_grid(spec: str) -> Grid:
  """`path.py[:arg]` → the file's `get_grid(arg)`, checked for unique, path-safe names."""
  path, _, arg = spec.partition(':')
  if not os.path.isfile(path):
    raise ValueError(f'Grid file {path!r} does not exist; pass --grid=configs/FILE.py[:ARG].')
  from vit_jax import config_lib  # pylint: disable=g-import-not-at-top
  module = config_lib.load_config_module(path)
  if not hasattr(module, 'get_grid'):
    raise ValueError(f'{path} has no get_grid(arg); a grid file returns vit_jax.study.Grid.')
  grid = module.get_grid(arg)
  names = [r.name for r in grid.runs]
  duplicates = sorted({n for n in names if names.count(n) > 1})
  bad = [n for n in names if not re.fullmatch(r'[\w.+-]+', n)]
  if duplicates or bad:
    raise ValueError(f'{path}: run names must be unique and path-safe ([A-Za-z0-9_.+-]); '
                     f'duplicates {duplicates}, bad {bad}.')
  return grid


def command_argv(run: Run, out: str, python: str = sys.executable) -> List[str]:
  """The argv of `run` in `out/<name>`: `{out}` filled, `python` = this interpreter, workdir."""
  argv = shlex.split(run.command.replace('{out}', out))
  if argv[:1] == ['python']:
    argv[0] = python
  return argv + [f'--workdir={os.path.join(out, run.name)}']


def is_finished(workdir: str) -> bool:
  """A run that exported its params (train.py writes metadata.json last)."""
  return all(os.path.isfile(os.path.join(workdir, f)) for f in ('params.npz', 'metadata.json'))


def read_state(workdir: str) -> Dict[str, Any]:
  path = os.path.join(workdir, STATE_FILE)
  if not os.path.isfile(path):
    return {'attempts': []}
  with open(path) as f:
    return json.load(f)


def record_attempt(workdir: str, command: str, wall_s: float, returncode: int) -> None:
  """Appends one attempt (start, wall seconds, exit code) to `workdir/study.json`."""
  state = read_state(workdir)
  state['command'] = command
  state['attempts'].append({'finished_at': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
                            'wall_s': round(wall_s, 2), 'returncode': returncode})
  tmp = os.path.join(workdir, f'{STATE_FILE}.tmp')
  with open(tmp, 'w') as f:
    json.dump(state, f, indent=1)
  os.replace(tmp, os.path.join(workdir, STATE_FILE))


def execute(run: Run, out: str, python: str = sys.executable) -> int:
  """Runs `run` as a subprocess (output appended to its study.log); returns its exit code.

  SIGTERM/SIGINT to the runner are passed on as SIGTERM (the trainer then checkpoints and
  stops), and the attempt is recorded before the runner exits.
  """
  workdir = os.path.join(out, run.name)
  os.makedirs(workdir, exist_ok=True)
  argv = command_argv(run, out, python)
  start = time.time()
  with open(os.path.join(workdir, LOG_FILE), 'a') as log:
    log.write(f'\n$ {shlex.join(argv)}\n')
    log.flush()
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
      returncode = proc.wait()
    except KeyboardInterrupt:
      proc.send_signal(signal.SIGTERM)
      returncode = proc.wait()
      record_attempt(workdir, shlex.join(argv), time.time() - start, returncode)
      raise
  record_attempt(workdir, shlex.join(argv), time.time() - start, returncode)
  return returncode


def run_grid(grid: Grid, out: str, *, python: str = sys.executable,
             log: Callable[[str], None] = print, results: str = '') -> List[str]:
  """Runs the unfinished runs of `grid` in order; returns the names of those that failed.

  With `results`, that file gets every run's record (`update_results`) after each run.
  """
  if grid.folders:
    prepare_folders(grid.folders.replace('{out}', out), limit=grid.folder_limit, log=log)
  failed = []
  for i, run in enumerate(grid.runs):
    workdir = os.path.join(out, run.name)
    if is_finished(workdir):
      log(f'[{i + 1}/{len(grid.runs)}] {run.name}: finished, skipped')
      continue
    log(f'[{i + 1}/{len(grid.runs)}] {run.name}: {run.command}')
    start = time.time()
    returncode = execute(run, out, python)
    status = 'done' if returncode == 0 and is_finished(workdir) else f'FAILED ({returncode})'
    log(f'[{i + 1}/{len(grid.runs)}] {run.name}: {status} in {time.time() - start:.0f}s '
        f'(log: {os.path.join(workdir, LOG_FILE)})')
    if status != 'done':
      failed.append(run.name)
    if results:
      update_results(results, grid, out)
  if results:
    update_results(results, grid, out)
  return failed


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


def _read_json(path: str) -> Optional[Dict[str, Any]]:
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return json.load(f)


def teacher_metadata(command: str) -> Optional[Dict[str, Any]]:
  """The metadata.json beside the `--config.distill.teacher_path=` of `command`, if any."""
  match = re.search(r'--config\.distill\.teacher_path=(\S+)', command)
  return _read_json(os.path.join(os.path.dirname(match.group(1)), 'metadata.json')
                    ) if match else None


def run_record(run: Run, out: str) -> Dict[str, Any]:
  """One results line of `run` from its run directory: its exact command, wall time (all
  attempts), and once finished train/val/test accuracy, steps, images seen and compute.

  Compute: `train_flops` = 3 x forward FLOPs per image x images seen (steps x batch), plus one
  teacher forward per image when distilling; evaluation is not counted.
  """
  workdir = os.path.join(out, run.name)
  attempts = read_state(workdir)['attempts']
  command = shlex.join(command_argv(run, out, python='python'))
  record = dict(name=run.name, tags=dict(run.tags), command=command,
                finished=is_finished(workdir), attempts=len(attempts),
                wall_s=round(float(sum(a['wall_s'] for a in attempts)), 1))
  meta = _read_json(os.path.join(workdir, 'metadata.json')) if record['finished'] else None
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
      accuracy_test=meta['accuracy'], num_examples_train=meta.get('num_examples_train'),
      num_examples_val=meta.get('num_examples_val'), num_examples_test=meta['num_examples'],
      forward_flops=flops, flops_source=source, teacher_forward_flops=teacher_flops,
      train_flops=(TRAIN_FLOPS_FACTOR * flops + teacher_flops) * images if images else None)
  return record


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


def update_results(path: str, grid: Grid, out: str) -> Dict[str, Dict[str, Any]]:
  """Rewrites the results file: a record for every run with a directory under `out`, and the
  file's other records kept (runs made elsewhere), in the grid's order; returns them all."""
  records = read_results(path)
  for run in grid.runs:
    if os.path.isdir(os.path.join(out, run.name)):
      records[run.name] = run_record(run, out)
  if not records:
    return {}
  order = {run.name: i for i, run in enumerate(grid.runs)}
  ordered = sorted(records.values(), key=lambda r: order.get(r['name'], len(order)))
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(f'{path}.tmp', 'w') as f:
    f.writelines(json.dumps(r, sort_keys=True) + '\n' for r in ordered)
  os.replace(f'{path}.tmp', path)
  return {r['name']: r for r in ordered}


def mean_std(values: Sequence[float]) -> Tuple[float, float]:
  """Mean and sample standard deviation (0 for a single value)."""
  array = np.asarray(values, np.float64)
  return float(array.mean()), float(array.std(ddof=1)) if len(array) > 1 else 0.


def table_cells(table: Table, runs: Sequence[Run]
                ) -> Tuple[List[Any], List[Any], Dict[Tuple[Any, Any], List[str]]]:
  """(row values, column values, {(row, col): run names}) in the order the grid lists them."""
  rows, cols, cells = [], [], {}
  for run in runs:
    if not all(_matches(run.tags.get(k), v) for k, v in table.where.items()):
      continue
    if table.row not in run.tags or table.col not in run.tags:
      continue
    r, c = run.tags[table.row], run.tags[table.col]
    rows += [r] if r not in rows else []
    cols += [c] if c not in cols else []
    cells.setdefault((r, c), []).append(run.name)
  return rows, cols, cells


def _matches(value: Any, wanted: Any) -> bool:
  """A tag matches a value, or one of a tuple of values."""
  return value in wanted if isinstance(wanted, tuple) else value == wanted


def _values(names: Sequence[str], records: Mapping[str, Dict[str, Any]], metric: str
            ) -> List[float]:
  """`metric` in % of the finished runs among `names`."""
  return [100 * records[n][metric] for n in names
          if n in records and records[n].get(metric) is not None]


def format_cell(names: Sequence[str], records: Mapping[str, Dict[str, Any]],
                metric: str = 'accuracy_test') -> str:
  """'87.12 ± 0.31 <sub>vit_p1_s0 vit_p1_s1</sub>'; unfinished runs are named, not averaged."""
  done = _values(names, records, metric)
  missing = len(names) - len(done)
  if not done:  # 'n/a': finished without this metric (e.g. a round-1 run has no accuracy_val).
    text = 'n/a' if all(records.get(n, {}).get('finished') for n in names) else 'unfinished'
  else:
    mean, std = mean_std(done)
    text = f'{mean:.2f} ± {std:.2f}' if len(done) > 1 else f'{mean:.2f}'
  if missing and done:
    text += f' ({missing} unfinished)'
  return f'{text} <sub>{" ".join(names)}</sub>'


def table_markdown(table: Table, runs: Sequence[Run],
                   records: Mapping[str, Dict[str, Any]]) -> str:
  """The table as markdown: a column per `col` value, a row per `row` value."""
  rows, cols, cells = table_cells(table, runs)
  header = [table.row] + [f'{table.col_label}{c}' for c in cols]
  lines = ['| ' + ' | '.join(header) + ' |', '|' + ' --- |' * len(header)]
  for r in rows:
    values = [format_cell(cells[(r, c)], records, table.metric) if (r, c) in cells else ''
              for c in cols]
    lines.append('| ' + ' | '.join([str(r)] + values) + ' |')
  return '\n'.join(lines)


def _pyplot():
  import matplotlib  # Imported lazily: the runner itself does not plot.
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  return plt


def plot_table(table: Table, runs: Sequence[Run], records: Mapping[str, Dict[str, Any]],
               png_path: str) -> None:
  """`metric` per row over the columns: lines over numeric columns, grouped bars otherwise."""
  plt = _pyplot()
  rows, cols, cells = table_cells(table, runs)
  numeric = all(isinstance(c, (int, float)) for c in cols)
  fig, ax = plt.subplots(figsize=(6.4, 4))
  for i, r in enumerate(rows):
    xs, means, stds = [], [], []
    for j, c in enumerate(cols):
      done = _values(cells.get((r, c), ()), records, table.metric)
      if done:
        mean, std = mean_std(done)
        xs.append(c if numeric else j + (i - (len(rows) - 1) / 2) * 0.8 / len(rows))
        means.append(mean)
        stds.append(std)
    if numeric:
      ax.errorbar(xs, means, yerr=stds, marker='o', capsize=3, label=str(r))
    else:
      ax.bar(xs, means, width=0.8 / len(rows), yerr=stds, capsize=3, label=str(r))
  if numeric and table.log_x:
    ax.set_xscale('log')
  if numeric:
    ax.set_xticks(cols, [str(c) for c in cols])
  else:
    ax.set_xticks(range(len(cols)), [str(c) for c in cols])
  ax.set(xlabel=table.col_label or table.col, ylabel=f'{_metric_name(table.metric)} (%)',
         title=table.title)
  _finish_plot(plt, fig, ax, png_path)


def plot_compute(table: Table, runs: Sequence[Run], records: Mapping[str, Dict[str, Any]],
                 png_path: str) -> None:
  """Each finished run of the table: `metric` over its training FLOPs (log), one colour a row."""
  plt = _pyplot()
  rows, _, cells = table_cells(table, runs)
  fig, ax = plt.subplots(figsize=(6.4, 4))
  for r in rows:
    names = [n for (row, _), ns in cells.items() if row == r for n in ns
             if records.get(n, {}).get(table.metric) is not None
             and records[n].get('train_flops') is not None]
    ax.scatter([records[n]['train_flops'] for n in names],
               [100 * records[n][table.metric] for n in names], label=str(r), alpha=.8)
  ax.set_xscale('log')
  ax.set(xlabel='training FLOPs (3 x forward x images seen)',
         ylabel=f'{_metric_name(table.metric)} (%)', title=f'{table.title}: by compute')
  _finish_plot(plt, fig, ax, png_path)


def _finish_plot(plt, fig, ax, png_path: str) -> None:
  ax.grid(alpha=.3)
  ax.legend(fontsize='small')
  fig.tight_layout()
  fig.savefig(png_path, dpi=100)
  plt.close(fig)


def _metric_name(metric: str) -> str:
  return metric.replace('accuracy_', '') + ' accuracy'


def _pct(value: Optional[float]) -> str:
  return '' if value is None else f'{100 * value:.2f}'


def runs_markdown(runs: Sequence[Run], records: Mapping[str, Dict[str, Any]]) -> str:
  """Every run: train / val / test accuracy, steps, compute, wall time and exact command."""
  lines = ['| run | train acc. (%) | val acc. (%) | test acc. (%) | steps | images seen | '
           'fwd MFLOPs/img | train TFLOPs | wall time | command |',
           '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |']
  for run in runs:
    r = records.get(run.name)
    if r is None or not r.get('finished'):
      wall = _fmt_wall(r['wall_s']) if r else ''
      lines.append(f'| {run.name} | | | unfinished | | | | | {wall} | |')
      continue
    lines.append(
        f'| {run.name} | {_pct(r["accuracy_train"])} | {_pct(r["accuracy_val"])} | '
        f'{_pct(r["accuracy_test"])} | {r["steps"]} | {r["images_seen"] or ""} | '
        f'{r["forward_flops"] / 1e6:.1f} | {_scaled(r["train_flops"], 1e12)} | '
        f'{_fmt_wall(r["wall_s"])} | `{r["command"]}` |')
  return '\n'.join(lines)


def _scaled(value: Optional[float], unit: float) -> str:
  return '' if value is None else f'{value / unit:.2f}'


def _fmt_wall(seconds: float) -> str:
  return f'{int(seconds) // 60}m{int(seconds) % 60:02d}s'


def report_markdown(grid: Grid, records: Mapping[str, Dict[str, Any]], report_dir: str,
                    image_dir: str, source: str) -> str:
  """The whole report from `records` (tables with plots, then every run); writes the PNGs into
  `report_dir`. `image_dir` is how the markdown refers to `report_dir`; `source` names the
  results file the records came from."""
  os.makedirs(report_dir, exist_ok=True)
  total = sum(records[r.name]['wall_s'] for r in grid.runs if r.name in records)
  done = sum(bool(records.get(r.name, {}).get('finished')) for r in grid.runs)
  parts = [f'{done} of {len(grid.runs)} runs finished; total wall time {_fmt_wall(total)} '
           f'({total / 3600:.2f} h). Generated by `python -m vit_jax.study --report` from '
           f'`{source}`. Compute: training FLOPs = 3 x forward FLOPs per image (vit_jax.flops; '
           'XLA\'s count for the ResNet) x images seen, plus the teacher\'s forward when '
           'distilling; evaluation not counted.']
  for table in grid.tables:
    png, compute_png = f'{table.name}.png', f'{table.name}_compute.png'
    plot_table(table, grid.runs, records, os.path.join(report_dir, png))
    plot_compute(table, grid.runs, records, os.path.join(report_dir, compute_png))
    parts += [f'### {table.title}', table_markdown(table, grid.runs, records),
              f'![{table.title}]({image_dir}/{png}) '
              f'![{table.title}: by compute]({image_dir}/{compute_png})']
  parts += ['### Every run', runs_markdown(grid.runs, records)]
  return '\n\n'.join(parts) + '\n'


def write_into_doc(doc: str, text: str) -> None:
  """Replaces the text between the DOC_BEGIN and DOC_END markers of `doc` with `text`."""
  with open(doc) as f:
    content = f.read()
  begin, end = content.find(DOC_BEGIN), content.find(DOC_END)
  if begin < 0 or end < begin:
    raise ValueError(f'{doc} lacks the markers {DOC_BEGIN} ... {DOC_END}; add them where the '
                     'generated tables go.')
  content = content[:begin + len(DOC_BEGIN)] + '\n' + text + content[end:]
  with open(doc, 'w') as f:
    f.write(content)


def folder_name(classes: Optional[Sequence[int]] = None) -> str:
  """'fashion_mnist' (all classes) or 'fashion_mnist_0-4' (a contiguous class subset)."""
  return FASHION_MNIST_NAME if classes is None else (
      f'{FASHION_MNIST_NAME}_{min(classes)}-{max(classes)}')


def class_folder(label: int, name: str) -> str:
  """'0_t-shirt_top': the label first, so sorted folders keep Fashion-MNIST's label order."""
  return f'{label}_' + re.sub(r'[^a-z0-9]+', '_', name.lower()).strip('_')


def prepare_folders(root: str, *, limit: int = 0,
                    subsets: Sequence[Sequence[int]] = (range(0, 5), range(5, 10)),
                    source_dir: Optional[str] = None,
                    log: Callable[[str], None] = print) -> None:
  """Writes Fashion-MNIST as `root/fashion_mnist/{train,test}/<label>_<name>/<index>.png`, once.

  Each class subset gets `root/fashion_mnist_<a>-<b>/{train,test}/` whose class folders link to
  those, so pretraining on classes 0-4 and fine-tuning on 5-9 read the same files. `limit` > 0
  keeps the first `limit` images of each class and split (smoke runs).
  """
  from PIL import Image  # Only here: the runner itself needs no imaging library.
  from vit_jax.data import fashion_mnist
  if os.path.isfile(os.path.join(root, FOLDERS_DONE)):
    return
  source = fashion_mnist.find_source_dir(source_dir)
  names = _label_names()
  log(f'Writing Fashion-MNIST from {source} as image folders under {root} (once) ...')
  counts = {}
  for split in fashion_mnist.FILENAMES:
    images, labels = fashion_mnist.load_split(source, split)
    for label in range(len(names)):
      folder = os.path.join(root, folder_name(), split, class_folder(label, names[label]))
      os.makedirs(folder, exist_ok=True)
      indices = np.flatnonzero(labels == label)[:limit or None]
      for i in indices:
        Image.fromarray(images[i, :, :, 0]).save(os.path.join(folder, f'{i:05d}.png'))
      counts[f'{split}/{label}'] = len(indices)
    for subset in subsets:
      for label in subset:
        link = os.path.join(root, folder_name(subset), split, class_folder(label, names[label]))
        os.makedirs(os.path.dirname(link), exist_ok=True)
        if not os.path.islink(link):
          os.symlink(os.path.join('..', '..', folder_name(), split, os.path.basename(link)), link)
  with open(os.path.join(root, FOLDERS_DONE), 'w') as f:
    json.dump({'source': source, 'limit': limit, 'counts': counts}, f, indent=1)


def _label_names() -> List[str]:
  path = os.path.join(os.path.dirname(__file__), 'labels', 'fashion_mnist.txt')
  with open(path) as f:
    return [line.strip() for line in f if line.strip()]


def _interrupt(signum, frame) -> None:
  raise KeyboardInterrupt(f'signal {signum}')


def main(argv: Sequence[str]) -> int:
  # SIGTERM (e.g. `kill` of a background runner) stops the current run at a checkpoint too.
  signal.signal(signal.SIGTERM, _interrupt)
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  f = flags.FLAGS
  if not f.grid:
    raise app.UsageError('--grid=FILE.py[:ARG] is required.')
  try:
    grid = load_grid(f.grid)
    results = f.results or os.path.join(f.out, RESULTS_FILE)
    failed = [] if f.report else run_grid(grid, f.out, results=results)
    records = update_results(results, grid, f.out)  # Run dirs present win; others are kept.
    if not records:
      raise ValueError(f'No results in {results}: run the grid first (without --report), or '
                       'pass --results=FILE.jsonl of a grid that ran.')
    report_dir = f.report_dir or f.out
    doc_dir = os.path.dirname(os.path.abspath(f.doc)) if f.doc else report_dir
    text = report_markdown(grid, records, report_dir,
                           os.path.relpath(report_dir, doc_dir) if f.doc else '.', results)
    with open(os.path.join(report_dir, 'report.md'), 'w') as out:
      out.write(text)
    if f.doc:
      write_into_doc(f.doc, text)
  except ValueError as e:
    print(f'error: {str(e).splitlines()[0]}', file=sys.stderr)
    return 1
  print(f'Report: {os.path.join(report_dir, "report.md")}')
  if failed:
    print(f'{len(failed)} run(s) failed: {", ".join(failed)}; see their study.log, fix, rerun.',
          file=sys.stderr)
    return 1
  return 0


def run() -> None:
  """The command line. Flags are defined here, not at import: grid files import this module,
  which `python -m` has already loaded once as `__main__`."""
  flags.DEFINE_string('grid', None, 'Grid file: path.py[:arg] with get_grid(arg).')
  flags.DEFINE_string('out', 'runs/study', 'Folder of the run directories (out/<name>).')
  flags.DEFINE_string('results', None, 'The results file (one JSON line a run) the runner '
                      'keeps and the report reads (default: --out/results.jsonl).')
  flags.DEFINE_bool('report', False, 'Only write the report, from --results (no run dirs needed).')
  flags.DEFINE_string('report_dir', None, 'Where the PNGs and report.md go (default: --out).')
  flags.DEFINE_string('doc', None, 'A markdown file whose study:begin/end block receives the '
                      'report (image links relative to it).')
  app.run(lambda argv: sys.exit(main(argv)))


if __name__ == '__main__':
  from vit_jax import study  # The one copy the grid file's Run/Grid/Table come from.
  study.run()
