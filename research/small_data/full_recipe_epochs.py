"""Round 3's `full` part: the full-data recipe's epoch count chosen on validation (issue 43,
point 5), then its one test number.

The recipe is configs/fashion_mnist_full.py's stage 1 (the hybrid at 56px, 44 epochs, as round 2
reported it: its epochs and augmentation had been chosen on test accuracy). Here each candidate
epoch count trains on `train[:90%]` and is compared on the validation slice `train[90%:]` (the
same slice the study config holds out); the best one (`select.choose`) then trains once on all
of train, and that run's test accuracy is the recipe's number. Every candidate also evaluates
test (the trainer always does), but no choice reads it.
"""

from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from research.small_data import fashion_mnist_grid as round2
from research.small_data import grid as grid_lib
from research.small_data import select
from vit_jax import config_lib

FULL_CONFIG = 'configs/fashion_mnist_full.py'
# Candidates: a quarter and half of round 2's 44 epochs. All 44 (`full_epochs=11+22+44`) was cut
# on 2026-11-28: that one run is ~3.4 h on 2 vCPUs, longer than a working session here, and its
# run directory did not outlive the session (lost at step 12,147 of 18,562).
EPOCHS = '11+22'
VAL_ROW = f'train[:{100 - round2.VAL_PCT}%], validation'
FINAL_ROW = 'all of train, test'
# Seconds per step of the recipe: round 2's 44-epoch run, 2 h 31 min for 20,636 steps of batch
# 128 (docs/fashion_mnist.md, 2026-11-23, 2 CPU devices on 2 vCPUs).
RATE = (2 * 3600 + 31 * 60) / 20_636
TRAIN_IMAGES = 60_000  # Fashion-MNIST's train split.


STAGE1 = f'{FULL_CONFIG}:pretrain'  # The recipe's stage 1 alone, one workdir.


def _batch() -> int:
  """The recipe's batch, from its config (only the estimate needs it)."""
  return int(config_lib.load_config_module(FULL_CONFIG).get_config('pretrain').batch)


def val_runs(epochs: Sequence[str]) -> Dict[str, grid_lib.Run]:
  """Each candidate epoch count on train[:90%], evaluated on train[90%:] (name → run)."""
  keep = 100 - round2.VAL_PCT
  return {e: grid_lib.Run(f'r3_full_e{e}_val',
                          f'python -m vit_jax.main --config={STAGE1} --config.num_epochs={e} '
                          f'--config.pp.train=train[:{keep}%] --config.pp.val=train[{keep}%:]',
                          dict(arm='full_val', full=VAL_ROW, epochs=int(e)))
          for e in epochs}


def final_run(epochs: str) -> grid_lib.Run:
  """The chosen epoch count on all of train: the recipe's test number."""
  return grid_lib.Run(f'r3_full_e{epochs}',
                      f'python -m vit_jax.main --config={STAGE1} --config.num_epochs={epochs}',
                      dict(arm='full', full=FINAL_ROW, epochs=int(epochs)))


def runs(epochs_arg: str, records: Mapping[str, Mapping]) -> List[grid_lib.Run]:
  """The candidates, then (once all have finished) the final run at the best one."""
  epochs = parse_epochs(epochs_arg)
  candidates = val_runs(epochs)
  chosen: Optional[str] = select.choose({e: r.name for e, r in candidates.items()}, records)
  return list(candidates.values()) + ([final_run(chosen)] if chosen else [])


def parse_epochs(text: str) -> Tuple[str, ...]:
  """'11+22+44' → ('11', '22', '44'): whole epoch counts."""
  epochs = tuple(text.split('+'))
  if not all(e.isdigit() and int(e) > 0 for e in epochs):
    raise ValueError(f'Bad full_epochs={text}; use whole epoch counts joined by +, e.g. 11+22+44.')
  return epochs


def estimate_seconds(epochs_arg: str, rate: float = RATE) -> float:
  """The part's run time before any run: every candidate, and the final run at the largest."""
  batch = _batch()
  epochs = [int(e) for e in parse_epochs(epochs_arg)]
  keep = (100 - round2.VAL_PCT) / 100
  steps = sum(e * TRAIN_IMAGES * keep / batch for e in epochs) + max(epochs) * TRAIN_IMAGES / batch
  return rate * steps


TABLES = (
    grid_lib.Table('r3_full_val', 'The full-data recipe: epochs chosen on validation',
                   row='full', col='epochs', where=dict(arm='full_val'), col_label='epochs ',
                   metric='accuracy_val'),
    grid_lib.Table('r3_full', 'The full-data recipe at the chosen epochs: its test number',
                   row='full', col='epochs', where=dict(arm='full'), col_label='epochs '),
)
