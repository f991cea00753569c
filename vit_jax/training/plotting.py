"""Training-curve history (`metrics.jsonl`) and its PNG plot."""

import json
import os
from typing import Dict, Mapping

CURVES = (('train_loss', 'loss_test'), ('accuracy_test',))


def append_history(path: str, step: int, scalars: Mapping[str, float]) -> None:
  """Appends one JSON line {step, **scalars}; a resumed run appends to the same file."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, 'a') as f:
    f.write(json.dumps({'step': int(step), **{k: float(v) for k, v in scalars.items()}}) + '\n')


def read_history(path: str) -> Dict[str, Dict[int, float]]:
  """{metric: {step: value}}; later lines win, so steps redone after a resume count once."""
  series: Dict[str, Dict[int, float]] = {}
  if not os.path.exists(path):
    return series
  with open(path) as f:
    for line in f:
      record = json.loads(line)
      step = record.pop('step')
      for key, value in record.items():
        series.setdefault(key, {})[step] = value
  return series


def plot_stages(histories: Mapping[str, str], png_path: str) -> None:
  """One figure: loss (train, test) and test accuracy per stage, stages side by side in x."""
  # A pyplot-free Figure, imported lazily (not on the training hot path): switching the global
  # backend to Agg here would stop a notebook that trains from showing its own plots.
  from matplotlib.figure import Figure
  fig = Figure(figsize=(11, 4))
  axes = fig.subplots(1, 2)
  offset = 0
  for stage, path in histories.items():
    series = read_history(path)
    last = offset
    for ax, keys in zip(axes, CURVES):
      for key in keys:
        points = sorted(series.get(key, {}).items())
        if points:
          steps, values = zip(*points)
          ax.plot([s + offset for s in steps], values, marker='.' if 'test' in key else None,
                  label=f'{stage} {key}' if len(histories) > 1 else key)
          last = max(last, offset + steps[-1])
    offset = last
  axes[0].set(xlabel='step', ylabel='loss', title='loss')
  axes[1].set(xlabel='step', ylabel='accuracy', title='test accuracy')
  for ax in axes:
    ax.grid(alpha=.3)
    if ax.get_legend_handles_labels()[0]:  # A panel may be empty (MAE logs no accuracy).
      ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(png_path, dpi=100)


def plot_curves(history_path: str, png_path: str) -> None:
  plot_stages({'train': history_path}, png_path)
