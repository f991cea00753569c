"""The report's plots: a table's metric over its columns (or its runs' validation curves), and
each run's metric over its compute.

Error bars are the 95% t-interval of each cell's mean over its runs (the slices), the interval
the verdicts use (cells.t_half_width), not their standard deviation. Rows at the same column
are drawn side by side (dodged), so none hides another. One colour and marker per row (up to 20
rows); legends sit right of the axes, in as many columns as keep them no taller than the plot;
the compute plot has one legend for its rows (colours) and one for its columns (markers), not
one entry per pair. matplotlib is imported lazily, since the runner itself does not plot.
"""

import math
from typing import Any, Dict, Mapping, Sequence

import numpy as np

from research.small_data import cells as cells_lib
from research.small_data import grid as grid_lib

# Up to 20 rows get a colour and a marker each (tab20 has 20 distinct colours).
MARKERS = ('o', 's', '^', 'D', 'v', 'P', 'X', '<', '>', '*')
# Legend entries one column holds beside a 4-inch plot at the 'small' font (~13 pt an entry
# against the axes' ~220 pt): a longer legend gets more columns instead of outgrowing the plot.
LEGEND_ROWS = 14
# Rows at one column are spread over this share of the smallest gap between columns.
DODGE_SHARE = 0.3
BARS = '(bars: 95% interval of the mean over the slices)'


def row_style(index: int) -> Dict[str, Any]:
  """A colour (tab20) and a marker of their own for the `index`-th row of a plot."""
  import matplotlib  # Lazily, as pyplot.
  # tab20's 10 dark shades first, then the light ones: neighbouring rows differ in hue.
  shade = 2 * (index % 10) + (index // 10) % 2
  return dict(color=matplotlib.colormaps['tab20'](shade), marker=MARKERS[index % len(MARKERS)])


def pyplot():
  """matplotlib's pyplot on the Agg backend (files only, no display)."""
  import matplotlib  # Imported lazily: the runner itself does not plot.
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  return plt


def plot_table(table: grid_lib.Table, runs: Sequence[grid_lib.Run],
               records: Mapping[str, Dict[str, Any]], png_path: str) -> None:
  """`metric` per row over the columns: lines over numeric columns (in increasing order; rows
  dodged around each column), grouped bars otherwise; error bars the 95% t-interval of each
  cell's mean. A row without a finished run is not drawn (nor in the legend)."""
  if table.curves:
    return plot_curves(table, runs, records, png_path)
  plt = pyplot()
  rows, cols, cells = cells_lib.table_cells(table, runs)
  numeric = all(isinstance(c, (int, float)) for c in cols)
  order = sorted(enumerate(cols), key=lambda jc: jc[1] if numeric else jc[0])
  values = {r: [(j, c, cells_lib.finished_values(cells.get((r, c), ()), records, table.metric))
                for j, c in order] for r in rows}
  drawn = [r for r in rows if any(done for _, _, done in values[r])]
  fig, ax = plt.subplots(figsize=(6.4, 4))
  for k, r in enumerate(drawn):
    i = rows.index(r)
    points = [(j, c, cells_lib.mean_std(done)[0], cells_lib.t_half_width(done))
              for j, c, done in values[r] if done]
    style = row_style(i)
    if numeric:
      xs = [dodge(c, k, len(drawn), cols, table.log_x) for _, c, _, _ in points]
      ax.errorbar(xs, [m for *_, m, _ in points], yerr=[h for *_, h in points], capsize=3,
                  label=str(r), **style)
    else:
      xs = [j + (k - (len(drawn) - 1) / 2) * 0.8 / len(drawn) for j, *_ in points]
      ax.bar(xs, [m for *_, m, _ in points], width=0.8 / len(drawn),
             yerr=[h for *_, h in points], capsize=3, label=str(r), color=style['color'],
             hatch=('', '//', '..', 'xx')[i // 20 % 4])
  if numeric and table.log_x:
    ax.set_xscale('log')
    ax.minorticks_off()  # Only the columns' own ticks: log minor labels would overlap them.
  if numeric:
    ax.set_xticks(cols, [str(c) for c in cols])
  else:
    ax.set_xticks(range(len(cols)), [str(c) for c in cols])
  xlabel = table.col_label.strip(' :')
  if numeric and len(drawn) > 1 and xlabel:
    xlabel += ' (rows drawn side by side)'
  ax.set(xlabel=xlabel, ylabel=f'{cells_lib.metric_name(table.metric)} (%)')
  bars = any(len(done) > 1 for r in drawn for _, _, done in values[r])
  ax.set_title(f'{table.title}\n{BARS}' if bars else table.title, fontsize='medium')
  _finish_plot(plt, fig, ax, png_path, [ax.get_legend_handles_labels()])


def plot_curves(table: grid_lib.Table, runs: Sequence[grid_lib.Run],
                records: Mapping[str, Dict[str, Any]], png_path: str) -> None:
  """Each finished run's validation curve over its steps, a colour and marker per row: where a
  probe was still rising and where it levelled off, which a bar of its last value hides (three
  candidates a few points apart looked alike as bars from 0). Its last point is the table's
  value; a run without a curve is not drawn."""
  plt = pyplot()
  rows, _, cells = cells_lib.table_cells(table, runs)
  fig, ax = plt.subplots(figsize=(6.4, 4))
  for i, r in enumerate(rows):
    names = [n for (row, _), ns in cells.items() if row == r
             for n in cells_lib.finished_names(ns, records, table.metric)
             if records[n].get('val_curve')]
    for k, name in enumerate(names):
      steps, accuracy = zip(*sorted(records[name]['val_curve']))
      ax.plot(steps, [100 * a for a in accuracy], label=str(r) if k == 0 else None,
              **row_style(i))
  ax.set(xlabel='training step', ylabel='val accuracy (%)')
  ax.set_title(f'{table.title}\n(each probe\'s validation curve)', fontsize='medium')
  _finish_plot(plt, fig, ax, png_path, [ax.get_legend_handles_labels()])


def dodge(x: float, k: int, n: int, cols: Sequence[float], log: bool) -> float:
  """Where the `k`-th of `n` rows draws its point of column `x`: spread symmetrically around
  it over `DODGE_SHARE` of the smallest gap between columns (in decades on a log axis)."""
  if n < 2:
    return x
  ticks = sorted({math.log10(c) if log else c for c in cols})
  gap = min((b - a for a, b in zip(ticks, ticks[1:])), default=1.)
  offset = (k - (n - 1) / 2) * DODGE_SHARE * gap / n
  return x * 10**offset if log else x + offset


def plot_compute(table: grid_lib.Table, runs: Sequence[grid_lib.Run],
                 records: Mapping[str, Dict[str, Any]], png_path: str) -> None:
  """Each finished run of the table: `metric` over its training FLOPs (log); a colour per row
  and a marker per column (e.g. the data fraction), each with a legend of its own."""
  from matplotlib import lines  # Lazily, as pyplot.
  plt = pyplot()
  rows, cols, cells = cells_lib.table_cells(table, runs)
  fig, ax = plt.subplots(figsize=(6.4, 4))
  shown_rows, shown_cols = [], []
  for i, r in enumerate(rows):
    for j, c in enumerate(cols):
      names = [n for n in cells_lib.finished_names(cells.get((r, c), ()), records, table.metric)
               if records[n].get('train_flops') is not None]
      if not names:
        continue
      ax.scatter([records[n]['train_flops'] for n in names],
                 [100 * records[n][table.metric] for n in names], alpha=.8,
                 color=row_style(i)['color'], marker=MARKERS[j % len(MARKERS)])
      shown_rows += [i] if i not in shown_rows else []
      shown_cols += [j] if j not in shown_cols else []
  ax.set_xscale('log')
  _readable_log_ticks(ax)
  ax.set(xlabel='training FLOPs (3 x forward x images seen)',
         ylabel=f'{cells_lib.metric_name(table.metric)} (%)', title=f'{table.title}: by compute')
  legends = [([lines.Line2D([], [], color=row_style(i)['color'], marker='o', linestyle='')
               for i in shown_rows], [str(rows[i]) for i in shown_rows])]
  if len(shown_cols) > 1:
    legends.append(([lines.Line2D([], [], color='0.3', marker=MARKERS[j % len(MARKERS)],
                                  linestyle='') for j in shown_cols],
                    [f'{table.col_label}{cols[j]}' for j in shown_cols]))
  _finish_plot(plt, fig, ax, png_path, legends)


def _readable_log_ticks(ax) -> None:
  """Labels at 1, 1.5 and every whole n x 10^k when the data span under half a decade (round 4's
  three probes, 7e13 to 1.8e14, showed only '10^14' otherwise), at 1, 2, 3 and 5 x 10^k under a
  decade, at 1, 2 and 5 under two (else at 10^k only), and none on the other minor ticks:
  matplotlib's own labels them all on a short log axis, and '3x10^12' ran into '4x10^12'."""
  from matplotlib import ticker  # Lazily, as pyplot.
  low, high = ax.get_xlim()
  decades = np.log10(high / low)
  subs = ((1., 1.5) + tuple(range(2, 10)) if decades < .5 else (1., 2., 3., 5.) if decades < 1
          else (1., 2., 5.) if decades < 2 else (1.,))
  ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=subs))
  ax.xaxis.set_major_formatter(ticker.FuncFormatter(_power_of_ten_label))
  ax.xaxis.set_minor_formatter(ticker.NullFormatter())


def _power_of_ten_label(x: float, _=None) -> str:
  """'$10^{13}$', '$5\\times10^{12}$', '$1.5\\times10^{14}$': a log axis's tick label."""
  exponent = int(np.floor(np.log10(x) + 1e-9))
  mantissa = float(f'{x / 10**exponent:.1f}')
  mantissa = int(mantissa) if mantissa.is_integer() else mantissa
  power = f'10^{{{exponent}}}'
  return f'${power}$' if mantissa == 1 else f'${mantissa}\\times{power}$'


def _finish_plot(plt, fig, ax, png_path: str, legends: Sequence[Any]) -> None:
  """Grid lines; the legends ((handles, labels) each, stacked) to the right of the axes, never
  over the data, each in as many columns as keep the stack within `LEGEND_ROWS` rows."""
  ax.grid(alpha=.3)
  legends = [(handles, labels) for handles, labels in legends if labels]
  total = sum(len(labels) + 1 for _, labels in legends)  # A gap of one entry between legends.
  columns = max(1, math.ceil(total / LEGEND_ROWS))
  top, drawn = 1., []
  for n, (handles, labels) in enumerate(legends):
    drawn.append(ax.legend(handles, labels, fontsize='small', loc='upper left',
                           bbox_to_anchor=(1.02, top), borderaxespad=0, ncol=columns))
    if n < len(legends) - 1:
      ax.add_artist(drawn[-1])  # Kept when the next legend call replaces the axes' legend.
      fig.canvas.draw()
      top = drawn[-1].get_window_extent().transformed(ax.transAxes.inverted()).y0 - .04
  fig.savefig(png_path, dpi=100, bbox_inches='tight', bbox_extra_artists=drawn)
  plt.close(fig)
