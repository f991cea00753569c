"""Which runs fill which cell of a grid's table, and the statistics of their finished values.

Shared by the report's markdown (report.py) and its plots (plots.py).
"""

import re
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np

from research.small_data import grid as grid_lib

FEWSHOT_METRIC = re.compile(r'fewshot_(\d+)shot')  # A record's few-shot field (records.py).


def metric_name(metric: str) -> str:
  """How a plot's axis names a record's metric ('test accuracy', '5-shot linear accuracy')."""
  few = FEWSHOT_METRIC.fullmatch(metric)
  if few:
    return f'{few[1]}-shot linear accuracy'
  return metric.replace('accuracy_', '') + ' accuracy'


def mean_std(values: Sequence[float]) -> Tuple[float, float]:
  """Mean and sample standard deviation (0 for a single value)."""
  array = np.asarray(values, np.float64)
  return float(array.mean()), float(array.std(ddof=1)) if len(array) > 1 else 0.


def t_half_width(values: Sequence[float], level: float = 0.95) -> float:
  """Half the width of the `level` t-interval of the mean of `values` (0 for fewer than two:
  one value says nothing about the spread). The verdicts' intervals and the plots' error bars
  are both this one."""
  if len(values) < 2:
    return 0.
  from scipy import stats  # Lazily: only reports with intervals need it.
  array = np.asarray(values, np.float64)
  return float(stats.t.ppf(0.5 + level / 2, len(array) - 1) * array.std(ddof=1)
               / np.sqrt(len(array)))


def table_cells(table: grid_lib.Table, runs: Sequence[grid_lib.Run]
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
  return rows, sorted(cols) if table.sort_cols else cols, cells


def _matches(value: Any, wanted: Any) -> bool:
  """A tag matches a value, or one of a tuple of values."""
  return value in wanted if isinstance(wanted, tuple) else value == wanted


def finished_names(names: Sequence[str], records: Mapping[str, Dict[str, Any]], metric: str
                   ) -> List[str]:
  """The runs among `names` whose record has `metric`: finished (an unfinished or failed run's
  record has none), in `names`' order."""
  return [n for n in names if records.get(n, {}).get(metric) is not None]


def finished_values(names: Sequence[str], records: Mapping[str, Dict[str, Any]], metric: str
                    ) -> List[float]:
  """`metric` in % of the finished runs among `names`."""
  return [100 * records[n][metric] for n in finished_names(names, records, metric)]
