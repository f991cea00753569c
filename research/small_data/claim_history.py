"""When each claim of a grid was written, read from git: the commit that added its row, and how
many of its runs had a committed finished record then (0: written before its data).

  python -c "from research.small_data import claim_history as h; h.print_history(
    'research/small_data/fashion_mnist_round3.py', 'docs/study/round3/results.jsonl')"

The grid files keep the answer in each claim (`Claim.written`, `Claim.recorded_then`), so the
report needs no git; tests/test_study.py checks those fields against this module. A claim is
found in a version of its grid file by the longest prefix of its words that any version holds
(a claim built by an f-string, 'Position embeddings help ({p}%)', is found by 'Position
embeddings help'); a claim reworded since is found by its `registered_as` wording.
"""

import dataclasses
import json
import os
import subprocess
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

from research.small_data import cells as cells_lib
from research.small_data import grid as grid_lib
from research.small_data import records

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


@dataclasses.dataclass(frozen=True)
class Version:
  """A committed version of a file: its commit, commit time (Unix s), date and text."""
  commit: str
  time: int
  date: str
  text: str


def _git(*args: str, root: str = ROOT) -> str:
  return subprocess.run(['git', '-C', root, *args], check=True, capture_output=True,
                        text=True).stdout


def has_history(root: str = ROOT) -> bool:
  """Whether `root` is a git checkout with its history (not a shallow clone or an export)."""
  try:
    return _git('rev-parse', '--is-shallow-repository', root=root).strip() == 'false'
  except (OSError, subprocess.CalledProcessError):
    return False


def versions(path: str, root: str = ROOT) -> List[Version]:
  """Every committed version of `path` (relative to `root`), oldest first, across renames."""
  log = _git('log', '--follow', '--name-only', '--format=@%H %ct %as', '--', path, root=root)
  found = []
  for entry in log.split('@')[1:]:
    head, *names = [line for line in entry.splitlines() if line.strip()]
    commit, time, date = head.split()
    text = _git('show', f'{commit}:{names[0] if names else path}', root=root)
    found.append(Version(commit, int(time), date, text.replace("\\'", "'")))
  return found[::-1]


def fragment(text: str, texts: Sequence[str]) -> str:
  """The longest prefix of `text`'s words that one of `texts` holds ('' if none)."""
  words = text.split(' ')
  for n in range(len(words), 0, -1):
    prefix = ' '.join(words[:n])
    if any(prefix in t for t in texts):
      return prefix
  return ''


def first_written(claim: grid_lib.Claim, grid_versions: Sequence[Version]) -> Optional[Version]:
  """The oldest version of the grid file that holds the claim (None: not committed yet)."""
  wording = claim.registered_as or claim.text
  prefix = fragment(wording, [v.text for v in grid_versions])
  if len(prefix.split(' ')) < 2:  # One word names no claim: not in any version.
    return None
  return next((v for v in grid_versions if prefix in v.text), None)


def finished_then(results_versions: Sequence[Version], time: int) -> Set[str]:
  """The runs with a finished record in the last results version committed by `time`."""
  before = [v for v in results_versions if v.time <= time]
  if not before:
    return set()
  lines = (json.loads(line) for line in before[-1].text.splitlines() if line.strip())
  return {r['name'] for r in lines if r.get('finished')}


def claim_runs(claim: grid_lib.Claim, grid: grid_lib.Grid) -> List[str]:
  """The runs of the claim's cells: its rows of its table, in its column."""
  table = next(t for t in grid.tables if t.name == claim.table)
  cells = cells_lib.table_cells(table, grid.runs)[2]
  return [n for _, row in claim.terms for n in cells.get((row, claim.col), [])]


def history(grid_path: str, results_path: str, arg: str = '', root: str = ROOT
            ) -> List[Tuple[grid_lib.Claim, Optional[str], int, int]]:
  """(claim, date written or None, its runs recorded then, its runs) for each claim of the grid
  file `grid_path` (`get_grid(arg)`, resolved with the committed results of `results_path`)."""
  by_name = records.read_results(os.path.join(root, results_path))
  grid = grid_lib.fully_resolved(grid_lib.load_grid(os.path.join(root, grid_path) + (
      f':{arg}' if arg else '')), by_name)
  grid_versions, results_versions = versions(grid_path, root), versions(results_path, root)
  out = []
  for claim in grid.claims:
    version = first_written(claim, grid_versions)
    runs = claim_runs(claim, grid)
    recorded = finished_then(results_versions, version.time) if version else set()
    out.append((claim, version.date if version else None, len(set(runs) & recorded),
                len(set(runs))))
  return out


def print_history(grid_path: str, results_path: str, arg: str = '') -> None:
  """Prints each claim's date and runs recorded then (what its Claim fields should hold)."""
  for claim, date, recorded, total in history(grid_path, results_path, arg):
    print(f'{date or "not committed"} | {recorded} of {total} runs recorded | {claim.text}')


def written_label(claim: grid_lib.Claim, total: int) -> str:
  """What the report's claims table says of when a claim was written ('' without a date)."""
  if not claim.written:
    return ''
  if claim.recorded_then == 0:
    when = f'{claim.written}, before its runs'
  elif claim.recorded_then >= total:
    when = f'{claim.written}, after all {total} of its runs'
  else:
    when = f'{claim.written}, after {claim.recorded_then} of its {total} runs'
  return f'{when}; {claim.revised}' if claim.revised else when


def check(claims: Sequence[grid_lib.Claim],
          found: Mapping[str, Tuple[Optional[str], int, int]]) -> Dict[str, str]:
  """{claim text: what differs} between the claims' fields and git's `found` {text: (date,
  its runs recorded then, its runs)}; a claim not committed yet must be dated and written
  before its runs."""
  problems = {}
  for claim in claims:
    date, recorded, total = found[claim.text]
    if date is None:
      if not claim.written or claim.recorded_then != 0:
        problems[claim.text] = 'not committed yet: give it written=<today> and recorded_then=0'
      continue
    counted = total if claim.recorded_then == grid_lib.ALL_RUNS else claim.recorded_then
    if (claim.written, counted) != (date, recorded):
      problems[claim.text] = (f'git says written={date!r}, recorded_then={recorded} (of '
                              f'{total}); the claim has {claim.written!r}, '
                              f'{claim.recorded_then}')
  return problems
