"""What a finished run directory reports: its last eval metrics, per stage for a two-stage run.

The measurement (research/self_supervised/measure.py) writes them into each step's
results file; this module only reads.
"""

import json
import os
from typing import Any, Dict


def summary(workdir: str) -> Dict[str, Any]:
  """`final`: the run's last eval metrics; for a two-stage run (pretrain/, finetune/), the
  fine-tuning stage's, and `stages`: each stage's start (its run.json) and last metrics."""
  if os.path.exists(os.path.join(workdir, 'metrics.jsonl')):
    return dict(final=final_metrics(workdir))
  stages = {}
  for stage in ('pretrain', 'finetune'):
    with open(os.path.join(workdir, stage, 'run.json')) as f:
      started = json.load(f)['history'][0]['time']
    stages[stage] = dict(started=started, final=final_metrics(os.path.join(workdir, stage)))
  return dict(final=stages['finetune']['final'], stages=stages)


def final_metrics(workdir: str) -> Dict[str, Any]:
  """The eval metrics logged at the run's last step (metrics.jsonl lines of that step merged)."""
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    lines = [json.loads(line) for line in f if line.strip()]
  last = max(line['step'] for line in lines)
  merged = {}
  for line in lines:
    if line['step'] == last:
      merged.update(line)
  return merged
