"""Choices made from recorded validation results: a training budget, a learning rate.

Grids whose later runs depend on earlier ones (round 3: a budget probe, then a learning-rate and
weight-decay sweep at seed 0, then the other seeds at the chosen values) call these from their
`Grid.resolve`; they read only validation accuracy, never test.
"""

from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

Record = Mapping[str, Any]


def budget_from_curve(curve: Sequence[Sequence[float]], tolerance: float = 0.005) -> int:
  """The first evaluated step after which validation accuracy rises by less than `tolerance`.

  `curve` is [[step, accuracy], ...] (a probe's `val_curve`). A later evaluation more than
  `tolerance` above a step's accuracy means the curve was still rising there. 0.005 is half a
  point: the standard error of an accuracy near 80% on the 6,000-image validation slice.

  Raises:
    ValueError: for an empty curve (a probe evaluated only at its end cannot say when it stopped
      rising: give it evals > 1).
  """
  if not curve:
    raise ValueError('The probe has no validation curve; run it with evals=8 (metrics.jsonl).')
  points = sorted((int(s), float(a)) for s, a in curve)
  for i, (step, accuracy) in enumerate(points):
    if all(later <= accuracy + tolerance for _, later in points[i + 1:]):
      return step
  return points[-1][0]  # Unreachable: the last point has nothing after it.


def finished_val(record: Optional[Record]) -> Optional[float]:
  """A finished run's validation accuracy, else None."""
  if not record or not record.get('finished') or record.get('accuracy_val') is None:
    return None
  return float(record['accuracy_val'])


def choose(candidates: Mapping[Any, str], records: Mapping[str, Record]) -> Optional[Any]:
  """The key (e.g. (lr, wd)) whose run (name) has the highest validation accuracy.

  None until every candidate run has finished: a choice from part of the sweep could change.
  Ties go to the first candidate in order.
  """
  scores: Dict[Any, float] = {}
  for key, name in candidates.items():
    val = finished_val(records.get(name))
    if val is None:
      return None
    scores[key] = val
  best = max(scores.values())
  return next(key for key, score in scores.items() if score == best)


def probe_budget(record: Optional[Record], tolerance: float = 0.005) -> Optional[int]:
  """The budget a finished probe's `val_curve` gives, or None while it runs."""
  if finished_val(record) is None:
    return None
  return budget_from_curve(record.get('val_curve') or [], tolerance)


def beyond_edge(lrs: Sequence[str], best: str) -> Optional[str]:
  """The learning rate one geometric step past the sweep's edge when `best` is its smallest or
  largest value (a choice at the edge may have its optimum outside the grid), else None.

  '5e-4' of ('5e-4', '1.5e-3', '4e-3') → '1.67e-4' (5e-4 x 5e-4 / 1.5e-3).
  """
  values = sorted(lrs, key=float)
  if len(values) < 2 or best not in (values[0], values[-1]):
    return None
  edge, inner = (values[0], values[1]) if best == values[0] else (values[-1], values[-2])
  mantissa, exponent = f'{float(edge) ** 2 / float(inner):.2e}'.split('e')
  return f'{float(mantissa):g}e{int(exponent)}'


def parse_values(text: str, name: str) -> Tuple[str, ...]:
  """'5e-4+1.5e-3' → ('5e-4', '1.5e-3'), each a number (kept as written: it names runs)."""
  values = tuple(text.split('+'))
  for value in values:
    try:
      float(value)
    except ValueError:
      raise ValueError(f'Bad {name}={text}; use numbers joined by +, e.g. 5e-4+1.5e-3.') from None
  return values
