"""Ties the fine-tuning stage of `pretrain_then_finetune` to the stage-1 export it started from.

Extending or rerunning stage 1 changes its `params.npz`; a stage 2 that fine-tuned another
export is then moved aside (never deleted) and starts afresh, so the two stages always match.
"""

import hashlib
import json
import os
from typing import Any, Dict, Optional

import jax
import numpy as np
from absl import logging

from vit_jax.training import parallel
from vit_jax.training import run_record

STAGE1_FILE = 'stage1.json'  # In the fine-tuning workdir: the stage-1 export it started from.


def stage1_source(params_path: str, step: int) -> Dict[str, Any]:
  """What identifies a stage-1 export: a sha256 of its arrays (names, dtypes, shapes, values) and
  the step it was exported at. Of the arrays, not the file: a rerun of a finished stage 1
  re-exports the same arrays into a zip with new timestamps."""
  digest = hashlib.sha256()
  with np.load(params_path, allow_pickle=False) as npz:
    for name in sorted(npz.files):
      array = npz[name]
      digest.update(f'{name}:{array.dtype.str}:{array.shape};'.encode())
      digest.update(np.ascontiguousarray(array).tobytes())
  return {'params_sha256': digest.hexdigest(), 'step': int(step)}


def _read_stage1(fine_dir: str) -> Optional[Dict[str, Any]]:
  path = os.path.join(fine_dir, STAGE1_FILE)
  if not os.path.exists(path):
    return None
  with open(path, encoding='utf-8') as f:
    return json.load(f)


def _free_name(path: str) -> str:
  candidate, n = path, 1
  while os.path.exists(candidate):
    n += 1
    candidate = f'{path}-{n}'
  return candidate


def tie_to_stage1(fine_dir: str, source: Dict[str, Any]) -> None:
  """Makes stage 2 fine-tune from this stage-1 export: a stage 2 that started from another one
  (stage 1 extended or rerun) is moved aside whole, never deleted, and starts afresh.

  The export stage 2 started from is recorded in `fine_dir/stage1.json`. A stage 2 with progress
  but no record (written by older code) cannot be vouched for and is moved aside too.
  """
  if jax.process_index() == 0:
    recorded = _read_stage1(fine_dir)
    if run_record.has_trained(fine_dir) and recorded != source:
      was = f'step {recorded["step"]}' if recorded else 'an unrecorded stage-1 export'
      moved = _free_name(f'{fine_dir}.from-stage1-' + (f'step{recorded["step"]}' if recorded
                                                       else 'unknown'))
      os.rename(fine_dir, moved)
      logging.warning('Stage 1 changed since stage 2 started (stage 2 fine-tuned from %s, stage 1 '
                      'is now at step %d): the old stage 2 is moved to %s, fine-tuning restarts.',
                      was, source['step'], moved)
    if _read_stage1(fine_dir) != source:
      os.makedirs(fine_dir, exist_ok=True)
      with open(os.path.join(fine_dir, STAGE1_FILE), 'w', encoding='utf-8') as f:
        json.dump(source, f, indent=1)
  parallel.barrier('vit_jax: stage 2 tied to stage 1')
