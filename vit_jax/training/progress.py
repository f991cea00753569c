"""What a run reports as it trains: one log line and one scalar record per interval."""

import time
from typing import Dict, Optional

import jax
import jax.numpy as jnp
from absl import logging

from vit_jax.training import parallel
from vit_jax.training import plotting


class ProgressLog:
  """One log line and one scalar record per interval: step, %, loss, lr, img/s/core, ETA.

  The loss is the mean over the interval's steps (summed on device: no host sync per step).
  """

  def __init__(self, writer, total: int, start_step: int, batch: int, history_path: str):
    self.writer, self.total, self.batch = writer, total, batch
    self.history_path = history_path
    self.last_step, self.last_time = start_step, time.time()
    self.start_step, self.start_time = start_step, time.time()
    self.data_wait = 0.
    self.loss_sum, self.loss_count = jnp.zeros((), jnp.float32), 0

  def add_loss(self, loss: jax.Array) -> None:
    self.loss_sum, self.loss_count = self.loss_sum + loss, self.loss_count + 1

  def train(self, step: int, lr: float) -> None:
    """Logs the interval ending at `step`; `lr` is the learning rate that step used."""
    loss = float(parallel.to_host(self.loss_sum)) / max(self.loss_count, 1)
    self.loss_sum, self.loss_count = jnp.zeros((), jnp.float32), 0
    now = time.time()
    steps = max(step - self.last_step, 1)
    img_s_core = self.batch * steps / max(now - self.last_time, 1e-9) / jax.device_count()
    done = step / self.total
    rate = (now - self.start_time) / max(step - self.start_step, 1)
    eta = (self.total - step) * rate
    wait = self.data_wait / max(now - self.last_time, 1e-9)
    logging.info('Step %d/%d (%.1f%%): loss=%.4f lr=%.3g img/s/core=%.1f data-wait=%.0f%% '
                 'ETA=%s', step, self.total, 100 * done, loss, lr, img_s_core, 100 * wait,
                 _fmt_seconds(eta))
    scalars = {'train_loss': loss, 'lr': lr, 'img_sec_core_train': img_s_core,
               'data_wait_fraction': wait}
    peak = peak_memory_mb()
    if peak is not None:
      scalars['peak_memory_mb'] = peak
    self.write(step, scalars)
    self.last_step, self.last_time, self.data_wait = step, now, 0.

  def write(self, step: int, scalars: Dict[str, float]) -> None:
    self.writer.write_scalars(step, scalars)
    if jax.process_index() == 0:
      plotting.append_history(self.history_path, step, scalars)


def peak_memory_mb() -> Optional[float]:
  """The largest peak allocation so far over this process's devices, in MiB.

  None where the backend keeps no allocator statistics (`memory_stats()` is None on CPU).
  """
  peaks = [stats['peak_bytes_in_use'] for stats in
           (device.memory_stats() for device in jax.local_devices())
           if stats and 'peak_bytes_in_use' in stats]
  return max(peaks) / 2**20 if peaks else None


def _fmt_seconds(seconds: float) -> str:
  seconds = int(seconds)
  return f'{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s'
