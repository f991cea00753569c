r"""Runs a grid of training runs one by one, resumably; records each in a results file to tabulate.

  python -m research.small_data --grid=research/small_data/fashion_mnist_grid.py --out=runs/study
  python -m research.small_data --grid=research/small_data/fashion_mnist_grid.py \
    --out=runs/study --results=docs/study/results.jsonl --report --report_dir=docs/study \
    --doc=docs/small_data_study.md

From the repository root (research/ is not installed). Modules: grid.py (Run, Table, Grid, the
grid file loader), runner.py (runs them), records.py (run directories → results file),
report.py (results file → tables, plots, doc block), folders.py (Fashion-MNIST image folders).

A grid file (a Python file with `get_grid(arg) -> Grid`, e.g. fashion_mnist_grid.py) lists runs:
a name and the exact `python -m vit_jax.main --config=...` command, with `{out}` standing for
`--out` (so a run can name another's params.npz as its teacher or its pretrained weights; list
that one first). Each run's workdir is `out/<name>`; a run is finished when its `params.npz` and
`metadata.json` exist, or when `--results` holds its finished record for the same command (so a
committed results file resumes the grid on a fresh machine with the same `--out`), and is then
skipped; a run finished only in the results file is made again when a run still to do needs its
params.npz (a teacher). An unfinished one is started again with the same command, which resumes
it from its orbax checkpoint. Every attempt's wall time and exit code go
to `out/<name>/study.json`, its output to `out/<name>/study.log`.

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
writes once from the local idx files (vit_jax.data.fashion_mnist), before the first run.
"""

import os
import signal
import sys
from typing import Sequence

from absl import app
from absl import flags

from research.small_data import grid as grid_lib
from research.small_data import records
from research.small_data import report
from research.small_data import runner
from vit_jax.tools import cli

_GRID = flags.DEFINE_string('grid', None, 'Grid file: path.py[:arg] with get_grid(arg).')
_RESULTS = flags.DEFINE_string(
    'results', None, 'The results file (one JSON line a run) the runner keeps and the report '
    'reads (default: --out/results.jsonl).')
_REPORT = flags.DEFINE_bool('report', False,
                            'Only write the report, from --results (no run dirs needed).')
_REPORT_DIR = flags.DEFINE_string('report_dir', None,
                                  'Where the PNGs and report.md go (default: --out).')
_DOC = flags.DEFINE_string('doc', None, 'A markdown file whose study:begin/end block receives '
                           'the report (image links relative to it).')
_DOC_MARKER = flags.DEFINE_string(
    'doc_marker', 'study', 'The --doc block to replace: between <!-- MARKER:begin --> and '
    '<!-- MARKER:end --> (round 3: study3; round 4: study4).')
# --out is vit_jax's shared --out (the FLOPs count imports vit_jax.tools, which defines it).
flags.declare_key_flag('out')
FLAG_DEFAULTS = {'out': 'runs/study'}
FLAG_HELP = {'out': 'Folder of the run directories (out/<name>).'}


class Stopped(KeyboardInterrupt):
  """SIGTERM or SIGINT to the runner: its current run is stopped at a checkpoint."""

  def __init__(self, signum: int):
    super().__init__(f'signal {signum}')
    self.signum = signum


def _stop(signum, frame) -> None:
  raise Stopped(signum)


def write_report(grid: grid_lib.Grid, results: str) -> str:
  """Writes report.md (and --doc's block) from `results`; returns the report's path."""
  by_name = records.update_results(results, grid, cli.OUT.value)  # Run dirs present win.
  grid = grid_lib.fully_resolved(grid, by_name)
  by_name = records.update_results(results, grid, cli.OUT.value)
  if not by_name:
    raise ValueError(f'No results in {results}: run the grid first (without --report), or '
                     'pass --results=FILE.jsonl of a grid that ran.')
  report_dir = _REPORT_DIR.value or cli.OUT.value
  doc = _DOC.value
  doc_dir = os.path.dirname(os.path.abspath(doc)) if doc else report_dir
  text = report.report_markdown(grid, by_name, report_dir,
                                os.path.relpath(report_dir, doc_dir) if doc else '.', results)
  with open(os.path.join(report_dir, 'report.md'), 'w') as out:
    out.write(text)
  if doc:
    report.write_into_doc(doc, text, _DOC_MARKER.value)
  return os.path.join(report_dir, 'report.md')


def main(argv: Sequence[str]) -> int:
  # `kill` (SIGTERM) stops the current run at a checkpoint as Ctrl-C does; SIGINT explicitly
  # too, since a job started with `&` from a script inherits SIGINT ignored.
  for signum in (signal.SIGTERM, signal.SIGINT):
    signal.signal(signum, _stop)
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  if not _GRID.value:
    raise app.UsageError('--grid=FILE.py[:ARG] is required.')
  try:
    grid = grid_lib.load_grid(_GRID.value)
    results = _RESULTS.value or os.path.join(cli.OUT.value, records.RESULTS_FILE)
    if not _REPORT.value:
      records.load_code()  # One version of the code for the whole call (see its docstring).
    failed = [] if _REPORT.value else runner.run_grid(grid, cli.OUT.value, results=results)
    path = write_report(grid, results)
  except ValueError as e:
    print(f'error: {str(e).splitlines()[0]}', file=sys.stderr)
    return 1
  except KeyboardInterrupt as e:
    signum = getattr(e, 'signum', signal.SIGINT)
    print(f'Stopped by signal {signum}: the current run saved its checkpoint; the same command '
          'resumes it.', file=sys.stderr)
    return 128 + signum
  print(f'Report: {path}')
  if failed:
    print(f'{len(failed)} run(s) failed: {", ".join(failed)}; see their study.log, fix, rerun.',
          file=sys.stderr)
    return 1
  return 0


if __name__ == '__main__':
  cli.adapt_shared_flags(sys.modules[__name__])
  app.run(lambda argv: sys.exit(main(argv)))
