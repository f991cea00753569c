"""The report of a grid from its results file: markdown tables (mean ± std), plots, run list.

`write_into_doc` puts it between the study:begin/end markers of a markdown file, so the numbers
of a write-up are generated, never typed.
"""

import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from research.small_data import grid as grid_lib


DOC_BEGIN, DOC_END = '<!-- study:begin -->', '<!-- study:end -->'
VERDICTS = ('supported', 'not supported', 'undecided')
# Up to 20 rows get a colour and a marker each (tab20 has 20 distinct colours).
MARKERS = ('o', 's', '^', 'D', 'v', 'P', 'X', '<', '>', '*')


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
  _, _, cells = table_cells(table, runs)
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


def row_style(index: int) -> Dict[str, Any]:
  """A colour (tab20) and a marker of their own for the `index`-th row of a plot."""
  import matplotlib  # Lazily, as _pyplot.
  # tab20's 10 dark shades first, then the light ones: neighbouring rows differ in hue.
  shade = 2 * (index % 10) + (index // 10) % 2
  return dict(color=matplotlib.colormaps['tab20'](shade), marker=MARKERS[index % len(MARKERS)])


def mean_std(values: Sequence[float]) -> Tuple[float, float]:
  """Mean and sample standard deviation (0 for a single value)."""
  array = np.asarray(values, np.float64)
  return float(array.mean()), float(array.std(ddof=1)) if len(array) > 1 else 0.


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


def table_markdown(table: grid_lib.Table, runs: Sequence[grid_lib.Run],
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


def baselines(table: grid_lib.Table, rows: Sequence[Any]) -> Dict[Any, Any]:
  """{row: its baseline row} of the rows that have one (not the baseline itself)."""
  if isinstance(table.baseline, str):
    return {r: table.baseline for r in rows if table.baseline and r != table.baseline}
  return {r: b for r, b in table.baseline.items() if r in rows}


def paired_deltas(table: grid_lib.Table, runs: Sequence[grid_lib.Run],
                  records: Mapping[str, Dict[str, Any]]) -> str:
  """Markdown: per row and column, `metric` minus the baseline row's run with the same seed
  (same slice), in points: mean ± std over the pairs, and how many pairs are above 0."""
  rows, cols, cells = table_cells(table, runs)
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
      mean, std = mean_std(diffs)
      spread = f' ± {std:.2f}' if len(diffs) > 1 else ''
      cells.append(f'{mean:+.2f}{spread} ({sum(d > 0 for d in diffs)} of {len(diffs)} > 0)')
    lines.append('| ' + ' | '.join([f'{r} − {base}'] + cells) + ' |')
  return '\n'.join(lines)


def _pyplot():
  import matplotlib  # Imported lazily: the runner itself does not plot.
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  return plt


def plot_table(table: grid_lib.Table, runs: Sequence[grid_lib.Run],
               records: Mapping[str, Dict[str, Any]], png_path: str) -> None:
  """`metric` per row over the columns: lines over numeric columns (in increasing order),
  grouped bars otherwise. A row without a finished run is not drawn (nor in the legend)."""
  plt = _pyplot()
  rows, cols, cells = table_cells(table, runs)
  numeric = all(isinstance(c, (int, float)) for c in cols)
  fig, ax = plt.subplots(figsize=(6.4, 4))
  for i, r in enumerate(rows):
    xs, means, stds = [], [], []
    for j, c in sorted(enumerate(cols), key=lambda jc: jc[1] if numeric else jc[0]):
      done = _values(cells.get((r, c), ()), records, table.metric)
      if done:
        mean, std = mean_std(done)
        xs.append(c if numeric else j + (i - (len(rows) - 1) / 2) * 0.8 / len(rows))
        means.append(mean)
        stds.append(std)
    if not xs:
      continue
    style = row_style(i)
    if numeric:
      ax.errorbar(xs, means, yerr=stds, capsize=3, label=str(r), **style)
    else:
      ax.bar(xs, means, width=0.8 / len(rows), yerr=stds, capsize=3, label=str(r),
             color=style['color'], hatch=('', '//', '..', 'xx')[i // 20 % 4])
  if numeric and table.log_x:
    ax.set_xscale('log')
    ax.minorticks_off()  # Only the columns' own ticks: log minor labels would overlap them.
  if numeric:
    ax.set_xticks(cols, [str(c) for c in cols])
  else:
    ax.set_xticks(range(len(cols)), [str(c) for c in cols])
  ax.set(xlabel=table.col_label.strip(' :'), ylabel=f'{_metric_name(table.metric)} (%)',
         title=table.title)
  _finish_plot(plt, fig, ax, png_path)


def plot_compute(table: grid_lib.Table, runs: Sequence[grid_lib.Run],
                 records: Mapping[str, Dict[str, Any]], png_path: str) -> None:
  """Each finished run of the table: `metric` over its training FLOPs (log); a colour per row,
  and per column (the data fraction) a marker of its own, so fractions are told apart."""
  plt = _pyplot()
  rows, cols, cells = table_cells(table, runs)
  fig, ax = plt.subplots(figsize=(6.4, 4))
  for i, r in enumerate(rows):
    for j, c in enumerate(cols):
      names = [n for n in cells.get((r, c), ())
               if records.get(n, {}).get(table.metric) is not None
               and records[n].get('train_flops') is not None]
      ax.scatter([records[n]['train_flops'] for n in names],
                 [100 * records[n][table.metric] for n in names], alpha=.8,
                 color=row_style(i)['color'], marker=MARKERS[j % len(MARKERS)],
                 label=f'{r}, {table.col_label}{c}' if names else None)
  ax.set_xscale('log')
  _readable_log_ticks(ax)
  ax.set(xlabel='training FLOPs (3 x forward x images seen)',
         ylabel=f'{_metric_name(table.metric)} (%)', title=f'{table.title}: by compute')
  _finish_plot(plt, fig, ax, png_path)


def _readable_log_ticks(ax) -> None:
  """Labels at 1, 2, 3 and 5 x 10^k when the data span under a decade, at 1, 2 and 5 under two
  (else at 10^k only), and none on the other minor ticks: matplotlib's own labels them all on a
  short log axis, and '3x10^12' ran into '4x10^12'."""
  from matplotlib import ticker  # Lazily, as _pyplot.
  low, high = ax.get_xlim()
  decades = np.log10(high / low)
  subs = (1., 2., 3., 5.) if decades < 1 else (1., 2., 5.) if decades < 2 else (1.,)
  ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=subs))
  ax.xaxis.set_major_formatter(ticker.FuncFormatter(_power_of_ten_label))
  ax.xaxis.set_minor_formatter(ticker.NullFormatter())


def _power_of_ten_label(x: float, _=None) -> str:
  """'$10^{13}$', '$5\\times10^{12}$': a log axis's tick label."""
  exponent = int(np.floor(np.log10(x) + 1e-9))
  mantissa = round(x / 10**exponent)
  power = f'10^{{{exponent}}}'
  return f'${power}$' if mantissa == 1 else f'${mantissa}\\times{power}$'


def _finish_plot(plt, fig, ax, png_path: str) -> None:
  """Grid lines; the legend to the right of the axes, never over the data."""
  ax.grid(alpha=.3)
  ax.legend(fontsize='small', loc='upper left', bbox_to_anchor=(1.02, 1), borderaxespad=0)
  fig.savefig(png_path, dpi=100, bbox_inches='tight')
  plt.close(fig)


FEWSHOT_METRIC = re.compile(r'fewshot_(\d+)shot')  # A record's few-shot field (records.py).


def _metric_name(metric: str) -> str:
  few = FEWSHOT_METRIC.fullmatch(metric)
  if few:
    return f'{few[1]}-shot linear accuracy'
  return metric.replace('accuracy_', '') + ' accuracy'


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
                 for m in [FEWSHOT_METRIC.fullmatch(k)] if m)
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
    if not any(_values(names, records, table.metric)
               for names in table_cells(table, grid.runs)[2].values()):
      parts.append('(No finished run of this table yet: no plot.)')  # A grid still running.
      continue
    png, compute_png = f'{table.name}.png', f'{table.name}_compute.png'
    plot_table(table, grid.runs, records, os.path.join(report_dir, png))
    plot_compute(table, grid.runs, records, os.path.join(report_dir, compute_png))
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
