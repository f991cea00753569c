"""The report of a grid from its results file: markdown tables (mean ± std), plots, run list.

cells.py groups a table's runs into its cells; plots.py draws them.

`write_into_doc` puts it between the study:begin/end markers of a markdown file, so the numbers
of a write-up are generated, never typed.
"""

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from research.small_data import cells as cells_lib
from research.small_data import grid as grid_lib
from research.small_data import plots


DOC_BEGIN, DOC_END = '<!-- study:begin -->', '<!-- study:end -->'
VERDICTS = ('supported', 'not supported', 'undecided')


def t_interval(values: Sequence[float], level: float = 0.95) -> Optional[Tuple[float, float,
                                                                                 float]]:
  """(mean, low, high): the `level` t-interval of the mean of paired differences; None for
  fewer than two (one slice says nothing about the spread between slices)."""
  if len(values) < 2:
    return None
  from scipy import stats  # Lazily: only reports with claims need it.
  array = np.asarray(values, np.float64)
  mean = float(array.mean())
  half = float(stats.t.ppf(0.5 + level / 2, len(array) - 1) * array.std(ddof=1)
               / np.sqrt(len(array)))
  return mean, mean - half, mean + half


def verdict(values: Sequence[float], kind: str = 'greater', margin: float = 1.) -> str:
  """The word the 95% interval of `values` (paired differences, points) supports.

  'greater' ("the effect is positive"): supported when the interval lies above 0, not
  supported when below, else undecided. 'within' ("it matters little": |effect| < margin):
  supported when the interval lies inside (-margin, margin), not supported when it lies wholly
  outside, else undecided. 'at_least' ("it is as good, within margin, or better": effect >
  -margin): supported when the interval lies above -margin, not supported when below it. One
  slice is always undecided.
  """
  interval = t_interval(values)
  if interval is None:
    return 'undecided'
  _, low, high = interval
  if kind == 'greater':
    return 'supported' if low > 0 else 'not supported' if high < 0 else 'undecided'
  if kind == 'within':
    if -margin < low and high < margin:
      return 'supported'
    return 'not supported' if low >= margin or high <= -margin else 'undecided'
  if kind == 'at_least':
    return 'supported' if low > -margin else 'not supported' if high < -margin else 'undecided'
  raise ValueError(f'Unknown claim kind {kind!r}; use greater, within or at_least.')


def claim_effects(claim: grid_lib.Claim, table: grid_lib.Table, runs: Sequence[grid_lib.Run],
                  records: Mapping[str, Dict[str, Any]]) -> List[float]:
  """The claim's effect (points) on each seed whose every term has a finished run."""
  _, _, cells = cells_lib.table_cells(table, runs)
  seed = {run.name: run.tags.get('seed') for run in runs}
  value = {}
  for (r, c), names in cells.items():
    for n in names:
      if c == claim.col and records.get(n, {}).get(table.metric) is not None:
        value[(r, seed[n])] = 100 * records[n][table.metric]
  seeds = sorted({s for _, s in value}, key=str)
  return [sum(coef * value[(row, s)] for coef, row in claim.terms) for s in seeds
          if all((row, s) in value for _, row in claim.terms)]


def claims_markdown(grid: grid_lib.Grid, records: Mapping[str, Dict[str, Any]]) -> str:
  """Each claim: its effect (mean of the paired differences), 95% interval, verdict."""
  tables = {t.name: t for t in grid.tables}
  lines = ['| claim | effect (points) | 95% interval | slices | verdict |',
           '| --- | --- | --- | --- | --- |']
  for claim in grid.claims:
    effects = claim_effects(claim, tables[claim.table], grid.runs, records)
    interval = t_interval(effects)
    if not effects:
      effect, span = 'unfinished', ''
    elif interval is None:
      effect, span = f'{effects[0]:+.2f}', 'one slice: none'
    else:
      effect, span = f'{interval[0]:+.2f}', f'[{interval[1]:+.2f}, {interval[2]:+.2f}]'
    word = verdict(effects, claim.kind, claim.margin) if effects else 'undecided'
    lines.append(f'| {claim.text} | {effect} | {span} | {len(effects)} | {word} |')
  return '\n'.join(lines)


def format_cell(names: Sequence[str], records: Mapping[str, Dict[str, Any]],
                metric: str = 'accuracy_test') -> str:
  """'87.12 ± 0.31 <sub>vit_p1_s0 vit_p1_s1</sub>'; unfinished runs are named, not averaged."""
  done = cells_lib.finished_values(names, records, metric)
  missing = len(names) - len(done)
  if not done:  # 'n/a': finished without this metric (e.g. a round-1 run has no accuracy_val).
    text = 'n/a' if all(records.get(n, {}).get('finished') for n in names) else 'unfinished'
  else:
    mean, std = cells_lib.mean_std(done)
    text = f'{mean:.2f} ± {std:.2f}' if len(done) > 1 else f'{mean:.2f}'
  if missing and done:
    text += f' ({missing} unfinished)'
  return f'{text} <sub>{" ".join(names)}</sub>'


def table_markdown(table: grid_lib.Table, runs: Sequence[grid_lib.Run],
                   records: Mapping[str, Dict[str, Any]]) -> str:
  """The table as markdown: a column per `col` value, a row per `row` value."""
  rows, cols, cells = cells_lib.table_cells(table, runs)
  header = [table.row] + [f'{table.col_label}{c}' for c in cols]
  lines = ['| ' + ' | '.join(header) + ' |', '|' + ' --- |' * len(header)]
  for r in rows:
    values = [format_cell(cells[(r, c)], records, table.metric) if (r, c) in cells else ''
              for c in cols]
    lines.append('| ' + ' | '.join([str(r)] + values) + ' |')
  return '\n'.join(lines)


def baselines(table: grid_lib.Table, rows: Sequence[Any]) -> Dict[Any, Any]:
  """{row: its baseline row} of the rows that have one (not the baseline itself)."""
  if isinstance(table.baseline, str):
    return {r: table.baseline for r in rows if table.baseline and r != table.baseline}
  return {r: b for r, b in table.baseline.items() if r in rows}


def paired_deltas(table: grid_lib.Table, runs: Sequence[grid_lib.Run],
                  records: Mapping[str, Dict[str, Any]]) -> str:
  """Markdown: per row and column, `metric` minus the baseline row's run with the same seed
  (same slice), in points: mean ± std over the pairs, and how many pairs are above 0."""
  rows, cols, cells = cells_lib.table_cells(table, runs)
  seed = {run.name: run.tags.get('seed') for run in runs}
  value = {(r, c, seed[n]): 100 * records[n][table.metric] for (r, c), names in cells.items()
           for n in names if records.get(n, {}).get(table.metric) is not None}
  pairs = baselines(table, rows)
  header = [f'{table.row} − baseline (points, paired by seed)'] + [
      f'{table.col_label}{c}' for c in cols]
  lines = ['| ' + ' | '.join(header) + ' |', '|' + ' --- |' * len(header)]
  for r, base in pairs.items():
    cells = []
    for c in cols:
      diffs = [v - value[(base, c, s)] for (row, col, s), v in value.items()
               if row == r and col == c and (base, c, s) in value]
      if not diffs:
        cells.append('')
        continue
      mean, std = cells_lib.mean_std(diffs)
      spread = f' ± {std:.2f}' if len(diffs) > 1 else ''
      cells.append(f'{mean:+.2f}{spread} ({sum(d > 0 for d in diffs)} of {len(diffs)} > 0)')
    lines.append('| ' + ' | '.join([f'{r} − {base}'] + cells) + ' |')
  return '\n'.join(lines)


def _pct(value: Optional[float]) -> str:
  return '' if value is None else f'{100 * value:.2f}'


def runs_markdown(runs: Sequence[grid_lib.Run], records: Mapping[str, Dict[str, Any]],
                  fewshot: bool = False) -> str:
  """Every run: train / val / test accuracy (and, with `fewshot`, the few-shot linear accuracy
  of its encoder per number of shots), steps, compute, wall time and exact command."""
  head = ['run', 'train acc. (%)', 'val acc. (%)', 'test acc. (%)']
  head += ['few-shot linear (%), shots: accuracy'] if fewshot else []
  head += ['steps', 'images seen', 'fwd MFLOPs/img', 'train TFLOPs', 'wall time', 'command']
  lines = ['| ' + ' | '.join(head) + ' |', '|' + ' --- |' * len(head)]
  for run in runs:
    r = records.get(run.name)
    if r is None or not r.get('finished'):
      wall = _fmt_wall(r['wall_s']) if r else ''
      lines.append(f'| {run.name} | | | unfinished |' + ' |' * (len(head) - 6) + f' {wall} | |')
      continue
    cells = [run.name, _pct(r['accuracy_train']), _pct(r['accuracy_val']),
             _pct(r['accuracy_test'])]
    cells += [_fewshot_cell(r)] if fewshot else []
    cells += [str(r['steps']), str(r['images_seen'] or ''), f'{r["forward_flops"] / 1e6:.1f}',
              _scaled(r['train_flops'], 1e12), _fmt_wall(r['wall_s']), f'`{r["command"]}`']
    lines.append('| ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def _fewshot_cell(record: Mapping[str, Any]) -> str:
  """'1: 61.20, 5: 70.05, ...' from a record's fewshot_<k>shot fields ('' before it is measured)."""
  shots = sorted((int(m[1]), v) for k, v in record.items()
                 for m in [cells_lib.FEWSHOT_METRIC.fullmatch(k)] if m)
  return ', '.join(f'{k}: {100 * v:.2f}' for k, v in shots)


def _scaled(value: Optional[float], unit: float) -> str:
  return '' if value is None else f'{value / unit:.2f}'


def _fmt_wall(seconds: float) -> str:
  return f'{int(seconds) // 60}m{int(seconds) % 60:02d}s'


def report_markdown(grid: grid_lib.Grid, records: Mapping[str, Dict[str, Any]], report_dir: str,
                    image_dir: str, source: str) -> str:
  """The whole report from `records` (tables with plots, then every run); writes the PNGs into
  `report_dir`. `image_dir` is how the markdown refers to `report_dir`; `source` names the
  results file the records came from."""
  os.makedirs(report_dir, exist_ok=True)
  total = sum(records[r.name]['wall_s'] for r in grid.runs if r.name in records)
  done = sum(bool(records.get(r.name, {}).get('finished')) for r in grid.runs)
  parts = [f'{done} of {len(grid.runs)} runs finished; total wall time {_fmt_wall(total)} '
           f'({total / 3600:.2f} h). Generated by `python -m research.small_data --report` from '
           f'`{source}`. Compute: training FLOPs = 3 x forward FLOPs per image (vit_jax.flops; '
           'XLA\'s count for the ResNet) x images seen, plus the teacher\'s forward when '
           'distilling; evaluation not counted.']
  if grid.claims:
    parts += ['### Claims: effect, 95% interval over slices, verdict',
              'Each effect is paired by slice (seed); its interval is the t-interval of the '
              'mean over the slices; "supported" needs the whole interval on the claim\'s side '
              '(for "matters little", inside ± its margin; for "as good as", above minus its '
              'margin), "not supported" the whole interval on the other side; one slice is '
              'always "undecided".',
              claims_markdown(grid, records)]
  for table in grid.tables:
    parts += [f'### {table.title}', table_markdown(table, grid.runs, records)]
    if table.baseline:
      parts.append(paired_deltas(table, grid.runs, records))
    if not any(cells_lib.finished_values(names, records, table.metric)
               for names in cells_lib.table_cells(table, grid.runs)[2].values()):
      parts.append('(No finished run of this table yet: no plot.)')  # A grid still running.
      continue
    png, compute_png = f'{table.name}.png', f'{table.name}_compute.png'
    plots.plot_table(table, grid.runs, records, os.path.join(report_dir, png))
    plots.plot_compute(table, grid.runs, records, os.path.join(report_dir, compute_png))
    parts.append(f'![{table.title}]({image_dir}/{png}) '
                 f'![{table.title}: by compute]({image_dir}/{compute_png})')
  parts += ['### Every run', runs_markdown(grid.runs, records, fewshot=grid.fewshot is not None)]
  return '\n\n'.join(parts) + '\n'


def no_results_block(results: str) -> str:
  """What a page's generated block holds before its grid has a results file."""
  return f'No run of this grid has finished yet: {results} does not exist.\n'


def doc_markers(marker: str = 'study') -> Tuple[str, str]:
  """The begin and end lines of a generated block ('study': round 2's; 'study3': round 3's)."""
  return f'<!-- {marker}:begin -->', f'<!-- {marker}:end -->'


def write_into_doc(doc: str, text: str, marker: str = 'study') -> None:
  """Replaces the text between the `marker` begin and end lines of `doc` with `text`."""
  doc_begin, doc_end = doc_markers(marker)
  with open(doc) as f:
    content = f.read()
  begin, end = content.find(doc_begin), content.find(doc_end)
  if begin < 0 or end < begin:
    raise ValueError(f'{doc} lacks the markers {doc_begin} ... {doc_end}; add them where the '
                     'generated tables go.')
  content = content[:begin + len(doc_begin)] + '\n' + text + content[end:]
  with open(doc, 'w') as f:
    f.write(content)
