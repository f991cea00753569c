"""The report's plots: a table's metric over its columns, and each run's metric over its compute.

One colour and marker per row (up to 20 rows), the legend outside the axes; matplotlib is
imported lazily, since the runner itself does not plot.
"""

from typing import Any, Dict, Mapping, Sequence

import numpy as np

from research.small_data import cells as cells_lib
from research.small_data import grid as grid_lib

# Up to 20 rows get a colour and a marker each (tab20 has 20 distinct colours).
MARKERS = ('o', 's', '^', 'D', 'v', 'P', 'X', '<', '>', '*')


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
  """`metric` per row over the columns: lines over numeric columns (in increasing order),
  grouped bars otherwise. A row without a finished run is not drawn (nor in the legend)."""
  plt = pyplot()
  rows, cols, cells = cells_lib.table_cells(table, runs)
  numeric = all(isinstance(c, (int, float)) for c in cols)
  fig, ax = plt.subplots(figsize=(6.4, 4))
  for i, r in enumerate(rows):
    xs, means, stds = [], [], []
    for j, c in sorted(enumerate(cols), key=lambda jc: jc[1] if numeric else jc[0]):
      done = cells_lib.finished_values(cells.get((r, c), ()), records, table.metric)
      if done:
        mean, std = cells_lib.mean_std(done)
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
  ax.set(xlabel=table.col_label.strip(' :'), ylabel=f'{cells_lib.metric_name(table.metric)} (%)',
         title=table.title)
  _finish_plot(plt, fig, ax, png_path)


def plot_compute(table: grid_lib.Table, runs: Sequence[grid_lib.Run],
                 records: Mapping[str, Dict[str, Any]], png_path: str) -> None:
  """Each finished run of the table: `metric` over its training FLOPs (log); a colour per row,
  and per column (the data fraction) a marker of its own, so fractions are told apart."""
  plt = pyplot()
  rows, cols, cells = cells_lib.table_cells(table, runs)
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
         ylabel=f'{cells_lib.metric_name(table.metric)} (%)', title=f'{table.title}: by compute')
  _finish_plot(plt, fig, ax, png_path)


def _readable_log_ticks(ax) -> None:
  """Labels at 1, 2, 3 and 5 x 10^k when the data span under a decade, at 1, 2 and 5 under two
  (else at 10^k only), and none on the other minor ticks: matplotlib's own labels them all on a
  short log axis, and '3x10^12' ran into '4x10^12'."""
  from matplotlib import ticker  # Lazily, as pyplot.
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
