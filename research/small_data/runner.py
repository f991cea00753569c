"""Runs a grid's unfinished runs one by one as subprocesses, resumably.

A run is finished when its `params.npz` and `metadata.json` exist, or when the results file
holds its finished record for the same command (a run made on another machine or in a run
directory since deleted); it is then skipped, unless a run still to do needs its directory (a
teacher's or pretrained params.npz): then it is restored from its kept copy, or else made again
with the same command and seed just before the first run that reads it (`runs_to_do`). An
unfinished run is started again with the same command, which resumes from its orbax checkpoint.
A grid that declares `fewshot` also gets, after each finished run, the few-shot linear accuracy
of its encoder (`measure_fewshot`).

Kept copies: with a results file, a finished run that other runs read is copied beside it
(`kept/<name>/`: params, metadata, attempts, curve and few-shot files; `keep`), to be committed
with the results (params up to `KEPT_LIMIT_BYTES`). A run directory does not outlive its
machine, and a teacher made again on another machine is another instance (its floating-point
results differ); restored from the kept copy (`restore_kept`), it is the same teacher for every
later student, and no session spends its time making it again.
"""

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from typing import Callable, Dict, List, Mapping, Set, Tuple

from research.small_data import folders
from research.small_data import grid as grid_lib
from research.small_data import records


LOG_FILE = 'study.log'


def execute(run: grid_lib.Run, out: str, python: str = sys.executable) -> int:
  """Runs `run` as a subprocess (output appended to its study.log); returns its exit code.

  SIGTERM/SIGINT to the runner are passed on as SIGTERM (the trainer then checkpoints and
  stops), and the attempt is recorded before the runner exits.
  """
  workdir = os.path.join(out, run.name)
  os.makedirs(workdir, exist_ok=True)
  argv = grid_lib.command_argv(run, out, python)
  start = time.time()
  records.begin_attempt(workdir, shlex.join(argv))
  with open(os.path.join(workdir, LOG_FILE), 'a') as log:
    log.write(f'\n$ {shlex.join(argv)}\n')
    log.flush()
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
      returncode = proc.wait()
    except KeyboardInterrupt:
      proc.send_signal(signal.SIGTERM)
      returncode = proc.wait()
      records.end_attempt(workdir, time.time() - start, returncode)
      raise
  records.end_attempt(workdir, time.time() - start, returncode)
  return returncode


def measure_fewshot(run: grid_lib.Run, fewshot: grid_lib.FewShot, out: str,
                    python: str = sys.executable) -> str:
  """Measures the few-shot linear accuracy of a finished run's encoder into its fewshot.json
  (the tool's output appended to its study.log), unless it has one for its current params and
  the same command; returns a line for the log ('' when nothing was to do).

  A failed measurement is a line, not an error: the run stays finished and its record lacks the
  few-shot fields; the next pass tries again.
  """
  workdir = os.path.join(out, run.name)
  command = shlex.join(grid_lib.fewshot_argv(fewshot, run.name, out, python='python'))
  done = records.read_fewshot(workdir)
  if not records.is_finished(workdir) or (done and done.get('command') == command):
    return ''
  argv = grid_lib.fewshot_argv(fewshot, run.name, out, python)
  start = time.time()
  with open(os.path.join(workdir, LOG_FILE), 'a') as log:
    log.write(f'\n$ {shlex.join(argv)}\n')
    log.flush()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
      stdout, _ = proc.communicate()
    except KeyboardInterrupt:
      proc.send_signal(signal.SIGTERM)
      proc.wait()
      raise
  try:
    doc = dict(json.loads(stdout), command=command) if proc.returncode == 0 else None
  except ValueError:  # Not the tool's JSON document: kept in the log, as a failure.
    with open(os.path.join(workdir, LOG_FILE), 'a') as log:
      log.write(stdout)
    doc = None
  if doc is None:
    return (f'{run.name}: few-shot FAILED ({proc.returncode}); see '
            f'{os.path.join(workdir, LOG_FILE)}')
  records.write_fewshot(workdir, doc)
  shots = ', '.join(f'{r["shots"]}-shot {100 * r["mean"]:.2f}%' for r in doc['results'])
  return f'{run.name}: few-shot linear {shots} in {time.time() - start:.0f}s'


KEPT_DIR = 'kept'
# Kept runs are committed with their results: a teacher this small (round 4's ResNet-11 is 2 MB)
# is kept, a bigger one (ResNet-18's 45 MB) is made again on a fresh machine.
KEPT_LIMIT_BYTES = 8 << 20
KEPT_FILES = ('params.npz', 'metadata.json', records.STATE_FILE, records.FEWSHOT_FILE,
              'metrics.jsonl')


def kept_dir(results: str, name: str) -> str:
  return os.path.join(os.path.dirname(os.path.abspath(results)), KEPT_DIR, name)


def reads(run: grid_lib.Run, name: str) -> bool:
  """Whether `run` reads run `name`'s directory (a teacher, a pretrained encoder)."""
  return f'{{out}}/{name}/' in run.command


def is_read(grid: grid_lib.Grid, name: str) -> bool:
  """Whether a run of `grid` reads run `name`'s directory."""
  return any(reads(r, name) for r in grid.runs)


def _copy_kept_files(src: str, dst: str) -> None:
  """Copies the `KEPT_FILES` that `src` has into `dst` (times kept)."""
  for name in KEPT_FILES:
    if os.path.isfile(os.path.join(src, name)):
      shutil.copy2(os.path.join(src, name), os.path.join(dst, name))


def keep(run: grid_lib.Run, grid: grid_lib.Grid, out: str, results: str) -> bool:
  """Copies a finished run that other runs read into `kept/<name>/` beside `results` (written
  beside it and renamed into place: a copy cut short leaves no kept run, never a mixed one);
  returns whether it copied."""
  workdir, kept = os.path.join(out, run.name), kept_dir(results, run.name)
  if not (results and is_read(grid, run.name) and records.is_finished(workdir)
          and os.path.getsize(os.path.join(workdir, 'params.npz')) <= KEPT_LIMIT_BYTES):
    return False
  present = lambda d: {n for n in KEPT_FILES if os.path.isfile(os.path.join(d, n))}
  if (records.is_finished(kept) and present(kept) == present(workdir)
      and records.params_sha256(kept) == records.params_sha256(workdir)):
    return False
  new, old = kept + '.new', kept + '.old'
  for path in (new, old):
    shutil.rmtree(path, ignore_errors=True)
  os.makedirs(new)
  _copy_kept_files(workdir, new)
  if os.path.isdir(kept):
    os.replace(kept, old)
  os.replace(new, kept)
  shutil.rmtree(old, ignore_errors=True)
  return True


def restore_kept(grid: grid_lib.Grid, out: str, results: str,
                 log: Callable[[str], None]) -> List[str]:
  """Copies each kept run (`keep`) not finished here into `{out}/<name>/`, when its params are
  an instance its finished record names (its own or one in `remade`) for the same command;
  returns the names restored."""
  recorded, restored = records.read_results(results) if results else {}, []
  for run in grid.runs:
    kept, workdir = kept_dir(results, run.name), os.path.join(out, run.name)
    if (not results or records.is_finished(workdir)
        or not records.is_finished(kept)):
      continue
    record = recorded.get(run.name, {})
    instances = {record.get('params_sha256')} | {
        r.get('params_sha256') for r in record.get('remade', ())}
    sha = records.params_sha256(kept)
    if not finished_in_results(run, out, recorded) or sha not in instances:
      log(f'{run.name}: {kept} not restored: its params ({sha[:8]}) are no instance that '
          f'{results} records for this command; delete it, or let the run be made again.')
      continue
    os.makedirs(workdir, exist_ok=True)
    _copy_kept_files(kept, workdir)
    fewshot = os.path.join(workdir, records.FEWSHOT_FILE)
    if os.path.isfile(fewshot):  # Kept with these params; a checkout's file times are arbitrary.
      os.utime(fewshot)
    log(f'{run.name}: restored from {kept} ({sha[:8]})')
    restored.append(run.name)
  return restored


def finished_in_results(run: grid_lib.Run, out: str, results: Mapping[str, Dict]) -> bool:
  """Whether `results` (read_results) holds a finished record of `run` with the same command."""
  record = results.get(run.name) or {}
  return bool(record.get('finished')) and record.get('command') == records.record_command(run, out)


def runs_to_do(grid: grid_lib.Grid, out: str, results: Mapping[str, Dict]) -> List[grid_lib.Run]:
  """The runs to start, in the order to start them: those finished neither here nor in
  `results`, and those finished only in `results` whose directory (`{out}/<name>/`) one of them
  reads (made again, a teacher's or pretrained params.npz).

  The runs ready to start (each directory they read is finished here) come first, in grid
  order; then those that wait for a run, each right after the runs it waits for. A run made
  again is started only just before the first run that reads it, so a session that ends first
  has not spent its time on a teacher that no run of it used.
  """
  here = {r.name for r in grid.runs if records.is_finished(os.path.join(out, r.name))}
  own = [r for r in grid.runs
         if r.name not in here and not finished_in_results(r, out, results)]
  by_name = {r.name: r for r in grid.runs}
  order: List[str] = []

  def waits_for(run: grid_lib.Run) -> List[str]:
    """The runs `run` reads that are neither finished here nor started before it."""
    return [r.name for r in grid.runs if r.name not in here and r.name not in order
            and reads(run, r.name)]

  def add(name: str, chain: Tuple[str, ...] = ()) -> None:
    if name in order or name in chain:
      return
    for needed in waits_for(by_name[name]):  # A rebuilt teacher may need a run of its own.
      add(needed, chain + (name,))
    order.append(name)

  pending = own
  while pending:
    add(next((r for r in pending if not waits_for(r)), pending[0]).name)
    pending = [r for r in pending if r.name not in order]
  return [by_name[name] for name in order]


def run_grid(grid: grid_lib.Grid, out: str, *, python: str = sys.executable,
             log: Callable[[str], None] = print, results: str = '') -> List[str]:
  """Runs the runs of `grid` still to do in `runs_to_do`'s order; returns the names of those
  that failed. With `results`, that file gets every run's record (`update_results`) after each
  run, and its finished records count as finished runs.

  A grid with `resolve` is resolved with the records after every run, and the next run is the
  first of the resolved grid's `runs_to_do`: a stage that a run's result unlocks (an arm's other
  seeds once its sweep has chosen) runs before the runs listed after it, instead of after a
  whole pass. A run that failed is not started again by this call; it ends when nothing is left
  to do and resolving adds no run.
  """
  if grid.folders:
    folders.prepare_folders(grid.folders.replace('{out}', out), limit=grid.folder_limit, log=log)
  failed: List[str] = []
  announced: Set[str] = set()  # Runs whose "finished, skipped" line is logged (once per call).
  while True:
    restore_kept(grid, out, results, log)
    ran = _run_pass(grid, out, python=python, log=log, results=results, failed=failed,
                    announced=announced, first_only=grid.resolve is not None)
    if grid.resolve is None:
      return failed
    known = records.read_results(results) if results else {
        r.name: records.run_record(r, out) for r in grid.runs
        if os.path.isdir(os.path.join(out, r.name))}
    new = grid.resolve(known)
    added = len({r.name for r in new.runs} - {r.name for r in grid.runs})
    if not ran and not added:
      return failed
    if added:
      log(f'Resolved: {added} run(s) added from recorded results.')
    grid = new


def _run_pass(grid: grid_lib.Grid, out: str, *, python: str, log: Callable[[str], None],
              results: str, failed: List[str], announced: Set[str], first_only: bool) -> bool:
  """A pass over `grid.runs`: the finished ones announced once, then the runs still to do in
  `runs_to_do`'s order, but those in `failed` (appended to); with `first_only` it stops after
  the first run it starts. Returns whether it started one."""
  todo = [r for r in runs_to_do(grid, out, records.read_results(results))
          if r.name not in failed]
  index = {r.name: i for i, r in enumerate(grid.runs)}
  to_start = {r.name for r in todo}
  for run in grid.runs:
    if run.name in failed or run.name in to_start:
      continue
    if run.name not in announced:
      where = '' if records.is_finished(os.path.join(out, run.name)) else f' (in {results})'
      log(f'[{index[run.name] + 1}/{len(grid.runs)}] {run.name}: finished{where}, skipped')
      announced.add(run.name)
    _fewshot(run, grid, out, python, log, results)
    if keep(run, grid, out, results):
      log(f'{run.name}: kept in {kept_dir(results, run.name)}')
  ran = False
  for run in todo:
    if ran and first_only:
      break
    workdir = os.path.join(out, run.name)
    number = f'[{index[run.name] + 1}/{len(grid.runs)}]'
    log(f'{number} {run.name}: {run.command}')
    start = time.time()
    returncode = execute(run, out, python)
    ran = True
    finished = returncode == 0 and records.is_finished(workdir)
    status = 'done' if finished else f'FAILED ({returncode})'
    log(f'{number} {run.name}: {status} in {time.time() - start:.0f}s '
        f'(log: {os.path.join(workdir, LOG_FILE)})')
    if status != 'done':
      failed.append(run.name)
    else:
      announced.add(run.name)
    if results:
      records.update_results(results, grid, out)
    _fewshot(run, grid, out, python, log, results)
    if keep(run, grid, out, results):  # After its few-shot file: kept with it.
      log(f'{run.name}: kept in {kept_dir(results, run.name)}')
  if results:
    records.update_results(results, grid, out)
  return ran


def _fewshot(run: grid_lib.Run, grid: grid_lib.Grid, out: str, python: str,
             log: Callable[[str], None], results: str) -> None:
  """The grid's few-shot measurement of `run` (when it declares one and it is due)."""
  line = measure_fewshot(run, grid.fewshot, out, python) if grid.fewshot else ''
  if line:
    log(line)
    if results:
      records.update_results(results, grid, out)
