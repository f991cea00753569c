"""Stopping a run cleanly on SIGTERM: the loop checkpoints, then returns `stopped_at`."""

import signal
import threading
from typing import Optional

import jax
import numpy as np
from absl import logging


class StopSignal:
  """Turns SIGTERM into a flag the loop checks, so it can checkpoint before exiting."""

  def __init__(self):
    self.received = False
    self._previous = None
    if threading.current_thread() is threading.main_thread():
      self._previous = signal.signal(signal.SIGTERM, self._handle)

  def _handle(self, signum, frame):
    del signum, frame
    logging.warning('SIGTERM received: saving a checkpoint before exiting.')
    self.received = True

  def check(self, step: int, every: Optional[int]) -> bool:
    """Whether all processes stop after `step`; they agree, so they all save the same step.

    With several processes the flags are gathered (a host sync) only every `every` steps.
    """
    if jax.process_count() == 1:
      return self.received
    if not (every and step % every == 0):
      return False
    from jax.experimental import multihost_utils  # Only for multi-process runs.
    return bool(np.any(multihost_utils.process_allgather(np.int32(self.received))))

  def restore(self):
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)
