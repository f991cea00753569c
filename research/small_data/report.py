"""The report of a grid from its results file: markdown tables (mean ± std), plots, run list.

cells.py groups a table's runs into its cells; plots.py draws them.

`write_into_doc` puts it between the study:begin/end markers of a markdown file, so the numbers
of a write-up are generated, never typed.
"""

import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from research.small_data import cells as cells_lib
from research.small_data import claim_history
from research.small_data import grid as grid_lib
from research.small_data import plots
from research.small_data import records as records_lib


DOC_BEGIN, DOC_END = '<!-- study:begin -->', '<!-- study:end -->'
VERDICTS = ('supported', 'not supported', 'undecided')


def t_interval(values: Sequence[float], level: float = 0.95) -> Optional[Tuple[float, float,
                                                                                 float]]:
  """(mean, low, high): the `level` t-interval of the mean of paired differences; None for
  fewer than two (one slice says nothing about the spread between slices)."""
  if len(values) < 2:
    return None
  mean = float(np.mean(np.asarray(values, np.float64)))
  half = cells_lib.t_half_width(values, level)
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


def points(accuracy: float) -> float:
  """The points scale: accuracy in %, as is."""
  return accuracy


def log_error(accuracy: float) -> Optional[float]:
  """The relative-error scale: ln(error in %); a sum of its differences is the log of a ratio
  of errors (None at 100% accuracy: no error to divide)."""
  return float(np.log(100. - accuracy)) if accuracy < 100. else None


def log_error_ratio(accuracy: float, reference: float) -> Optional[float]:
  """ln(error / reference's error), accuracies in % (None where either is 100%)."""
  if accuracy >= 100. or reference >= 100.:
    return None
  return log_error(accuracy) - log_error(reference)


def error_change(log_ratio: float) -> str:
  """A (mean) log error ratio as a change of the error in %: '-25.0' is a quarter fewer."""
  return f'{100 * (np.exp(log_ratio) - 1):+.1f}'


def logit(accuracy: float) -> Optional[float]:
  """The logit scale: ln(accuracy / error) (None at 0 or 100%)."""
  return float(np.log(accuracy / (100. - accuracy))) if 0. < accuracy < 100. else None


def claim_effects(claim: grid_lib.Claim, table: grid_lib.Table, runs: Sequence[grid_lib.Run],
                  records: Mapping[str, Dict[str, Any]],
                  scale: Callable[[float], Optional[float]] = points) -> List[float]:
  """The claim's effect on each seed whose every term has a finished run: the sum of its terms'
  coefficients times `scale` of their accuracy in % (points: a difference in points;
  `log_error`: the log of a ratio of errors; `logit`: a difference of logits), minus `scale` of
  the claim's target accuracy when it has one."""
  _, _, cells = cells_lib.table_cells(table, runs)
  seed = {run.name: run.tags.get('seed') for run in runs}
  value = {(r, seed[n]): scale(100 * records[n][table.metric])
           for (r, c), names in cells.items() if c == claim.col
           for n in cells_lib.finished_names(names, records, table.metric)}
  seeds = sorted({s for _, s in value}, key=str)
  target = 0. if claim.target is None else scale(claim.target)
  return [sum(coef * value[(row, s)] for coef, row in claim.terms) - target for s in seeds
          if all(value.get((row, s)) is not None for _, row in claim.terms)]


def _effect_cells(effects: Sequence[float], fmt: Callable[[float], str]) -> Tuple[str, str]:
  """(effect, interval) cells of a claim's per-slice effects, each value through `fmt`."""
  interval = t_interval(effects)
  if not effects:
    return 'unfinished', ''
  if interval is None:
    return fmt(effects[0]), 'one slice: none'
  return fmt(interval[0]), f'[{fmt(interval[1])}, {fmt(interval[2])}]'


def arm_compute(table: grid_lib.Table, runs: Sequence[grid_lib.Run],
                records: Mapping[str, Dict[str, Any]], row: Any, col: Any) -> str:
  """'19.0 × 5,400': the forward MFLOPs per image and the steps of a cell's finished runs
  (several values joined by '/'; '' before any finished)."""
  names = cells_lib.table_cells(table, runs)[2].get((row, col), [])
  done = [records[n] for n in names if records.get(n, {}).get('forward_flops') is not None]
  flops = sorted({f'{r["forward_flops"] / 1e6:.1f}' for r in done}, key=float)
  steps = sorted({r['steps'] for r in done})
  return f'{"/".join(flops)} × {"/".join(f"{n:,}" for n in steps)}' if done else ''


def claims_markdown(grid: grid_lib.Grid, records: Mapping[str, Dict[str, Any]]) -> str:
  """Each claim: its effect (mean of the paired differences), 95% interval, verdict; the
  compute of each of its rows (what else its arms differ in); when it was written (git)."""
  tables = {t.name: t for t in grid.tables}
  dated = any(c.written for c in grid.claims)
  head = ['claim', 'effect (points)', '95% interval', 'slices', 'verdict',
          'per row: fwd MFLOPs/image × steps'] + ['written (git)'] * dated
  lines = ['| ' + ' | '.join(head) + ' |', '|' + ' --- |' * len(head)]
  for claim in grid.claims:
    table = tables[claim.table]
    effects = claim_effects(claim, table, grid.runs, records)
    effect, span = _effect_cells(effects, lambda x: f'{x:+.2f}')
    word = verdict(effects, claim.kind, claim.margin) if effects else 'undecided'
    computes = [(row, arm_compute(table, grid.runs, records, row, claim.col))
                for _, row in claim.terms]
    compute = '; '.join(f'{row}: {c}' for row, c in computes if c)
    cells = [claim.text, effect, span, str(len(effects)), word, compute]
    if dated:
      runs = claim_history.claim_runs(claim, grid)
      cells.append(claim_history.written_label(claim, len(set(runs))))
    lines.append('| ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def relative_markdown(grid: grid_lib.Grid, records: Mapping[str, Dict[str, Any]]) -> str:
  """Each claim in relative error (the ratio of its rows' errors, 100 − accuracy: Π error^coef,
  as a change in %) and on the logit scale, each with its 95% interval over slices and, for a
  claim that an effect is positive, the verdict that interval supports (the margins of the
  other kinds are in points)."""
  tables = {t.name: t for t in grid.tables}
  lines = ['| claim | error change (%) | 95% interval | verdict | logit effect | 95% interval | '
           'verdict |', '| --- | --- | --- | --- | --- | --- | --- |']
  for claim in grid.claims:
    table = tables[claim.table]
    ratios = claim_effects(claim, table, grid.runs, records, log_error)
    logits = claim_effects(claim, table, grid.runs, records, logit)
    change = _effect_cells(ratios, error_change)
    shift = _effect_cells(logits, lambda x: f'{x:+.3f}')
    if claim.kind == 'greater':  # Fewer errors is the claim's side: a log ratio below 0.
      words = (verdict([-r for r in ratios]) if ratios else 'undecided',
               verdict(logits) if logits else 'undecided')
    else:
      words = ('margin in points',) * 2
    lines.append(f'| {claim.text} | {change[0]} | {change[1]} | {words[0]} | {shift[0]} | '
                 f'{shift[1]} | {words[1]} |')
  return '\n'.join(lines)


def own_teacher(record: Mapping[str, Any], records: Mapping[str, Dict[str, Any]]
                ) -> Optional[Tuple[float, str]]:
  """(test accuracy in %, instance label) of the teacher a finished distilled run learned from:
  its record's `teacher`; for a run recorded before records named it, the teacher run's own
  record (its first instance: the only one until a teacher was first made again, after them).
  None for a run not distilled or a teacher without a test accuracy."""
  path = records_lib.teacher_path(record.get('command', ''))
  if path is None:
    return None
  named = record.get('teacher')
  if named is None:
    first = records.get(os.path.basename(os.path.dirname(path)), {})
    named = dict(accuracy_test=first.get('accuracy_test'),
                 params_sha256=first.get('params_sha256', ''))
  if named.get('accuracy_test') is None:
    return None
  label = named['params_sha256'][:8] or 'first'
  return 100 * named['accuracy_test'], label


def student_teacher_markdown(runs: Sequence[grid_lib.Run],
                             records: Mapping[str, Dict[str, Any]]) -> str:
  """DeiT's comparison: each row of chosen distilled runs against the teacher instance each run
  learned from (`own_teacher`), paired by slice: the per-slice differences, their mean with its
  95% interval and verdict, in points and in relative error. '' when no chosen run is
  distilled."""
  pairs: Dict[Any, List[Tuple[Any, float, float, str]]] = {}
  for run in runs:
    record = records.get(run.name, {})
    teacher = own_teacher(record, records) if record.get('finished') else None
    if run.tags.get('chosen') and teacher and record.get('accuracy_test') is not None:
      pairs.setdefault(run.tags.get('row', run.name), []).append(
          (run.tags.get('seed'), 100 * record['accuracy_test'], *teacher))
  if not pairs:
    return ''
  lines = ['| row | per slice: student − its teacher (instance), test % | effect (points) | '
           '95% interval | verdict | error change (%) | 95% interval | verdict |',
           '|' + ' --- |' * 8]
  for row, items in pairs.items():
    per_slice = '; '.join(f'seed {s}: {a:.2f} − {t:.2f} ({label})'
                          for s, a, t, label in sorted(items, key=lambda i: str(i[0])))
    diffs = [a - t for _, a, t, _ in items]
    ratios = [r for r in (log_error_ratio(a, t) for _, a, t, _ in items) if r is not None]
    effect = _effect_cells(diffs, lambda x: f'{x:+.2f}')
    change = _effect_cells(ratios, error_change)
    lines.append(f'| {row} | {per_slice} | {effect[0]} | {effect[1]} | {verdict(diffs)} | '
                 f'{change[0]} | {change[1]} | {verdict([-r for r in ratios])} |')
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
  (same slice), in points: mean ± std over the pairs, how many pairs are above 0, and the
  change of the error (100 − `metric`) relative to the baseline's (the geometric mean over the
  pairs of error / baseline's error, minus 1: −25% is a quarter fewer errors)."""
  rows, cols, cells = cells_lib.table_cells(table, runs)
  seed = {run.name: run.tags.get('seed') for run in runs}
  value = {(r, c, seed[n]): 100 * records[n][table.metric] for (r, c), names in cells.items()
           for n in cells_lib.finished_names(names, records, table.metric)}
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
      ratios = [log_error_ratio(v, value[(base, c, s)]) for (row, col, s), v in value.items()
                if row == r and col == c and (base, c, s) in value]
      error = ('' if None in ratios else f'; error {error_change(float(np.mean(ratios)))}%')
      cells.append(f'{mean:+.2f}{spread} ({sum(d > 0 for d in diffs)} of {len(diffs)} > 0)'
                   f'{error}')
    lines.append('| ' + ' | '.join([f'{r} − {base}'] + cells) + ' |')
  return '\n'.join(lines)


def _pct(value: Optional[float]) -> str:
  return '' if value is None else f'{100 * value:.2f}'


def runs_markdown(runs: Sequence[grid_lib.Run], records: Mapping[str, Dict[str, Any]],
                  fewshot: bool = False) -> str:
  """Every run: train / val / test accuracy (and, with `fewshot`, the few-shot linear accuracy
  of its encoder per number of shots), steps, compute, wall time and exact command; a run made
  again with the same command (`records.update_results`' `remade`) adds a row per instance."""
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
    for again in r.get('remade', ()):
      cells = [f'{run.name}, made again ({again["params_sha256"][:8]})',
               _pct(again.get('accuracy_train')), _pct(again.get('accuracy_val')),
               _pct(again.get('accuracy_test'))]
      cells += [_fewshot_cell(again)] if fewshot else []
      cells += [''] * 4 + [_fmt_wall(again['wall_s']), 'the same command']
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
  remade = [a['wall_s'] for r in grid.runs for a in records.get(r.name, {}).get('remade', ())]
  total += sum(remade)
  again = f', with {len(remade)} run(s) made again' if remade else ''
  done = sum(bool(records.get(r.name, {}).get('finished')) for r in grid.runs)
  parts = [f'{done} of {len(grid.runs)} runs finished; total wall time {_fmt_wall(total)} '
           f'({total / 3600:.2f} h{again}). Generated by `python -m research.small_data '
           f'--report` from `{source}`. Compute: training FLOPs = 3 x forward FLOPs per image '
           '(vit_jax.flops; XLA\'s count for the ResNet) x images seen, plus the teacher\'s '
           'forward when distilling; evaluation not counted.']
  if grid.claims:
    parts += ['### Claims: effect, 95% interval over slices, verdict',
              'Each effect is paired by slice (seed); its interval is the t-interval of the '
              'mean over the slices; "supported" needs the whole interval on the claim\'s side '
              '(for "matters little", inside ± its margin; for "as good as", above minus its '
              'margin), "not supported" the whole interval on the other side; one slice is '
              'always "undecided". Beside each claim, the compute of each of its rows (forward '
              'MFLOPs per image × training steps, from the records): an effect between rows '
              'that differ in compute, tokens or regularisation as well as in architecture is '
              'the effect of all of those together. "written (git)": the date of the commit '
              'that added the claim, and how many of its runs had a committed record then '
              '(research/small_data/claim_history.py; tests/test_study.py checks it).',
              claims_markdown(grid, records),
              '### The claims in relative error and on the logit scale',
              'A point is worth more near 100% than near 70%: the same claims as the ratio of '
              'their rows\' errors (error = 100 − accuracy; a two-row claim\'s "−25%" means its '
              'first row makes a quarter fewer errors than its second; a claim of four rows, '
              'the ratio of the two ratios) and as a difference of logits, ln(accuracy / error), '
              'each paired by slice, its 95% t-interval over the slices (of the log of the '
              'ratio, shown as a change in %) and its verdict for a claim that an effect is '
              'positive (fewer errors, a higher logit).',
              relative_markdown(grid, records)]
  pairs = student_teacher_markdown(grid.runs, records)
  if pairs:
    parts += ['### Each distilled recipe against the teacher it learned from (test)',
              'DeiT\'s comparison, paired by slice: each chosen distilled run against the '
              'teacher instance it learned from (its record\'s `teacher`: the params\' SHA-256 '
              'and accuracies; "first": a run recorded before records named it, which learned '
              'from the teacher\'s first record). A teacher made again on another machine is '
              'another instance, so this can differ from a claim paired with the baseline row.',
              pairs]
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
  """The begin and end lines of a generated block ('study': round 2's; 'study3', 'study4': round
  3's, round 4's)."""
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
