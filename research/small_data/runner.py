"""Runs a grid's unfinished runs one by one as subprocesses, resumably.

A run is finished when its `params.npz` and `metadata.json` exist, and is then skipped; an
unfinished one is started again with the same command, which resumes from its orbax checkpoint.
"""

import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Callable, List

from research.small_data import folders
from research.small_data import grid as grid_lib
from research.small_data import records


LOG_FILE = 'study.log'


def command_argv(run: grid_lib.Run, out: str, python: str = sys.executable) -> List[str]:
  """The argv of `run` in `out/<name>`: `{out}` filled, `python` = this interpreter, workdir."""
  argv = shlex.split(run.command.replace('{out}', out))
  if argv[:1] == ['python']:
    argv[0] = python
  return argv + [f'--workdir={os.path.join(out, run.name)}']


def execute(run: grid_lib.Run, out: str, python: str = sys.executable) -> int:
  """Runs `run` as a subprocess (output appended to its study.log); returns its exit code.

  SIGTERM/SIGINT to the runner are passed on as SIGTERM (the trainer then checkpoints and
  stops), and the attempt is recorded before the runner exits.
  """
  workdir = os.path.join(out, run.name)
  os.makedirs(workdir, exist_ok=True)
  argv = grid_lib.command_argv(run, out, python)
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
      records.record_attempt(workdir, shlex.join(argv), time.time() - start, returncode)
      raise
  records.record_attempt(workdir, shlex.join(argv), time.time() - start, returncode)
  return returncode


def run_grid(grid: grid_lib.Grid, out: str, *, python: str = sys.executable,
             log: Callable[[str], None] = print, results: str = '') -> List[str]:
  """Runs the unfinished runs of `grid` in order; returns the names of those that failed.

  With `results`, that file gets every run's record (`update_results`) after each run.
  """
  if grid.folders:
    folders.prepare_folders(grid.folders.replace('{out}', out), limit=grid.folder_limit, log=log)
  failed = []
  for i, run in enumerate(grid.runs):
    workdir = os.path.join(out, run.name)
    if records.is_finished(workdir):
      log(f'[{i + 1}/{len(grid.runs)}] {run.name}: finished, skipped')
      continue
    log(f'[{i + 1}/{len(grid.runs)}] {run.name}: {run.command}')
    start = time.time()
    returncode = execute(run, out, python)
    finished = returncode == 0 and records.is_finished(workdir)
    status = 'done' if finished else f'FAILED ({returncode})'
    log(f'[{i + 1}/{len(grid.runs)}] {run.name}: {status} in {time.time() - start:.0f}s '
        f'(log: {os.path.join(workdir, LOG_FILE)})')
    if status != 'done':
      failed.append(run.name)
    if results:
      records.update_results(results, grid, out)
  if results:
    records.update_results(results, grid, out)
  return failed
