"""What a grid is: the runs (exact commands) and the report's tables, read from a grid file."""

import dataclasses
import os
import re
import shlex
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from vit_jax import config_lib


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
  accuracy_train; in %) over its runs (the seeds). `baseline` (a row value, or {row: its
  baseline row}) adds a table of paired differences: each run minus its baseline's run of the
  same column and seed (the same data slice), so slice-to-slice spread cancels.
  """
  name: str
  title: str
  row: str
  col: str
  where: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  col_label: str = ''
  log_x: bool = False
  metric: str = 'accuracy_test'
  baseline: Union[str, Mapping[str, str]] = ''
  sort_cols: bool = False  # Columns in increasing order (else as the grid lists the runs).
  # The plot draws each run's validation curve (its `val_curve`) over its steps instead of the
  # metric per column: for probes, whose choice and budget are read off those curves.
  curves: bool = False


@dataclasses.dataclass(frozen=True)
class Claim:
  """A claim tested on a table: its effect is a sum of rows (coefficient, row value) of column
  `col`, paired by seed (the same data slice), e.g. ((1, 'ViT strong'), (-1, 'ViT plain')).

  `kind` 'greater': the claim is "effect > 0"; 'within': "|effect| < margin" (points), a claim
  that something matters little; 'at_least': "effect > -margin", a claim that one arm is as good
  as another (within the margin) or better. With `target` (an accuracy in %), the effect is the
  sum minus the target, e.g. ((1, 'recipe'),) with target 95.0: "the recipe reaches 95%". The
  report gives each a 95% t-interval over the slices and a verdict (report.verdict), in points,
  in relative error and on the logit scale.

  When it was written is part of the claim: `written` is the date of the commit that added it
  and `recorded_then` how many of its runs had a committed finished record at that commit (0:
  written before its data), both read from git (claim_history.py; tests/test_study.py checks
  them); `revised` says what changed since and when (its test, its wording), and
  `registered_as` keeps its wording when written, if reworded since ('' = `text`).
  """
  text: str
  table: str
  terms: Tuple[Tuple[float, Any], ...]
  col: Any
  kind: str = 'greater'
  margin: float = 1.
  target: Optional[float] = None
  written: str = ''
  recorded_then: int = -1  # -1: not known (a claim without `written`); `ALL_RUNS`: all of them.
  revised: str = ''
  registered_as: str = ''


ALL_RUNS = 1_000_000  # Claim.recorded_then of a claim written after every one of its runs.


def difference_claim(text: str, table: str, plus: Any, minus: Any, col: Any, **kwargs) -> Claim:
  """The claim that row `plus` − row `minus` of column `col` is > 0 (or, with kind='within',
  inside ± margin)."""
  return Claim(text, table, ((1, plus), (-1, minus)), col, **kwargs)


@dataclasses.dataclass(frozen=True)
class FewShot:
  """The few-shot linear accuracy of every finished run's encoder (`python -m vit_jax.fewshot`).

  Shots are drawn from `train_split` of the image folder `dataset` (with `{out}`) and tested on
  all of its test split; `args` are further flags of the tool (e.g. '--shots=1,2' for folders of
  a few images per class). The runner measures it after each run, results records it as
  `fewshot_<k>shot` (mean test accuracy over the tool's seeds).
  """
  dataset: str
  train_split: str = 'train'
  args: Tuple[str, ...] = ()


Records = Mapping[str, Dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Grid:
  """What a grid file's `get_grid(arg)` returns.

  `folders` (with `{out}`) is where `prepare_folders` writes Fashion-MNIST as image folders
  (None: the grid needs none); `folder_limit` keeps that many images per class and split (0 =
  all; for smoke runs). `resolve(records)`, when set, returns the grid with the runs that
  depend on recorded results (a budget read off a probe's validation curve, the seeds after a
  validation choice) added: the runner calls it after each pass, the report before tabulating.
  `fewshot`, when set, adds the few-shot linear accuracy of every finished run (`FewShot`).
  """
  runs: Sequence[Run]
  tables: Sequence[Table] = ()
  folders: Optional[str] = None
  folder_limit: int = 0
  claims: Sequence[Claim] = ()
  resolve: Optional[Callable[[Records], 'Grid']] = None
  fewshot: Optional[FewShot] = None


def fully_resolved(grid: Grid, records: Records) -> Grid:
  """`grid` resolved until it adds no run (its own when it has no `resolve`)."""
  while grid.resolve is not None:
    new = grid.resolve(records)
    if [r.name for r in new.runs] == [r.name for r in grid.runs] and new.runs == grid.runs:
      return new
    grid = new
  return grid


def load_grid(spec: str) -> Grid:
  """`path.py[:arg]` → the file's `get_grid(arg)`, checked for unique, path-safe names."""
  path, _, arg = spec.partition(':')
  if not os.path.isfile(path):
    raise ValueError(f'Grid file {path!r} does not exist; pass '
                     '--grid=research/small_data/FILE.py[:ARG].')
  module = config_lib.load_config_module(path)
  if not hasattr(module, 'get_grid'):
    raise ValueError(f'{path} has no get_grid(arg); a grid file returns '
                     'research.small_data.grid.Grid.')
  grid = module.get_grid(arg)
  names = [r.name for r in grid.runs]
  duplicates = sorted({n for n in names if names.count(n) > 1})
  bad = [n for n in names if not re.fullmatch(r'[\w.+-]+', n)]
  if duplicates or bad:
    raise ValueError(f'{path}: run names must be unique and path-safe ([A-Za-z0-9_.+-]); '
                     f'duplicates {duplicates}, bad {bad}.')
  return grid


def fewshot_argv(fewshot: FewShot, run_name: str, out: str,
                 python: str = sys.executable) -> List[str]:
  """The argv that measures the few-shot linear accuracy of the run `out/<run_name>` (JSON)."""
  return [python, '-m', 'vit_jax.fewshot', f'--checkpoint={os.path.join(out, run_name)}',
          f'--dataset={fewshot.dataset.replace("{out}", out)}',
          f'--train_split={fewshot.train_split}', *fewshot.args, '--json']


def command_argv(run: Run, out: str, python: str = sys.executable) -> List[str]:
  """The argv of `run` in `out/<name>`: `{out}` filled, `python` = this interpreter, workdir."""
  argv = shlex.split(run.command.replace('{out}', out))
  if argv[:1] == ['python']:
    argv[0] = python
  return argv + [f'--workdir={os.path.join(out, run.name)}']
