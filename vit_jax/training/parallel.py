"""The 1-D data-parallel mesh over every device of every process, and moving data onto it.

One code path for 1 device, N local devices and N processes: batches are sharded over the 'data'
axis (`P('data')`), each process contributing only its local slice of a global batch. Params,
optimizer state and weight average are replicated (`P()`), or with `param_sharding='fsdp'` split
over the same axis (`fsdp_sharding`), so each device holds 1/N of them.
"""

import logging as python_logging
import math
import os
import sys
import threading
import time
from typing import Any, Callable, Iterator, Mapping, Optional, Tuple

import jax
import numpy as np
from absl import logging
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from vit_jax import config_lib
from vit_jax.training import supervisor

DATA_AXIS = 'data'
# Arrays below this stay replicated under 'fsdp': 1-D biases and norms (<= 20 KiB even in ViT-H)
# would cost a collective each and save nothing; every ViT kernel (>= 144 KiB) is above it.
FSDP_MIN_BYTES = 64 * 1024
# A process lost from a multi-process run (killed, crashed, its host gone) ends the others with
# this code (sysexits' EX_TEMPFAIL: rerun the same command, the run resumes from a checkpoint).
EXIT_PEER_LOST = supervisor.EXIT_PEER_LOST  # One code, whichever process says it.
# Another process stopped with an error (its line is printed): this one stops too, as a failed run.
EXIT_PEER_FAILED = 1
# JAX's own coordination service aborts every process (SIGABRT and a thread dump) at the earliest
# this long after the watchdog's timeout, as a backstop should the watchdog not get to run.
JAX_HEARTBEAT_MARGIN_S = 30


def jax_heartbeat_timeout(peer_timeout: float) -> int:
  """`heartbeat_timeout_seconds` for `jax.distributed.initialize`: its verdict after the watchdog's.

  JAX sends a heartbeat every half of this timeout and declares a process dead when the timeout
  passes without one, so a process killed just before its next heartbeat is declared dead half
  the timeout after the kill (measured with jaxlib 0.10.2 and a 20 s timeout, kills 2, 7, 12 and
  16 s after the start: the survivor aborted 18.4, 14.0, 18.6 and 14.8 s later; with the
  timeout at `peer_timeout + 30` = 90 s, a survivor was aborted 57 s after a kill, before the
  60 s watchdog). Twice `peer_timeout + JAX_HEARTBEAT_MARGIN_S` keeps even that earliest verdict
  `JAX_HEARTBEAT_MARGIN_S` after the watchdog's.
  """
  return 2 * (int(math.ceil(peer_timeout)) + JAX_HEARTBEAT_MARGIN_S)


def maybe_initialize_distributed(coordinator_address: Optional[str] = None,
                                 num_processes: Optional[int] = None,
                                 process_id: Optional[int] = None,
                                 peer_timeout: int = 60) -> None:
  """Starts JAX's distributed runtime when the run is launched as several processes.

  Explicit arguments win; otherwise JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES /
  JAX_PROCESS_ID; otherwise JAX's own auto-detection on TPU pods and SLURM. A plain single
  process run does nothing. JAX's coordination service declares a silent process dead at the
  earliest `JAX_HEARTBEAT_MARGIN_S` after `peer_timeout` (`jax_heartbeat_timeout`: its backstop;
  `PeerWatchdog` acts first).
  """
  timeouts = dict(heartbeat_timeout_seconds=jax_heartbeat_timeout(peer_timeout))
  address = coordinator_address or os.environ.get('JAX_COORDINATOR_ADDRESS')
  if address:
    num = num_processes if num_processes is not None else int(os.environ['JAX_NUM_PROCESSES'])
    pid = process_id if process_id is not None else int(os.environ['JAX_PROCESS_ID'])
    # Cross-process collectives on CPU (tests, CPU clusters); GPUs/TPUs use their own.
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
    jax.distributed.initialize(coordinator_address=address, num_processes=num, process_id=pid,
                               **timeouts)
  elif _on_managed_cluster():
    jax.distributed.initialize(**timeouts)
  logging.info('JAX process %d / %d, %d local / %d global devices', jax.process_index(),
               jax.process_count(), jax.local_device_count(), jax.device_count())


class PeerWatchdog:
  """Ends this process with one line when another process goes silent or stops with an error.

  Left alone, a survivor waits in its next collective until JAX's coordination service notices
  the missed heartbeats, then aborts (SIGABRT, exit 134) with a thread dump that names no process.
  Here each process writes a beat counter to the coordination service's key-value store every
  `interval` s; a peer whose counter has not moved for `timeout` s (or the coordinator itself
  becoming unreachable) is reported by index (exit `EXIT_PEER_LOST`). A process that stops with
  an error says so first (`fail`): the others read its line at their next beat and exit with
  `EXIT_PEER_FAILED`, naming it, instead of waiting in a collective or barrier it will never
  join. `os._exit` skips the shutdown barrier, which would wait for the lost process.
  Checkpoints already written are complete (orbax renames a step into place only when every
  process finished it), so the rerun resumes from the newest one.
  """

  PREFIX = 'vit_jax/alive/'
  FAILED_PREFIX = 'vit_jax/failed/'
  STOPPED = 'stopped'  # A peer's key once it read another's failure (it is exiting too).
  LEAVE_GRACE_S = 2.  # How long process 0 waits for the others' exit once they all said so.

  def __init__(self, timeout: float, message: Callable[[int, str], str],
               failed_message: Optional[Callable[[int, str], str]] = None):
    from jax._src import distributed  # orbax reads the same client for its barriers.
    self.client = distributed.global_state.client
    self.me, self.count = jax.process_index(), jax.process_count()
    # Each beat reads every process's key: 1 s up to 64 processes, slower beyond (the
    # coordinator answers count^2 / interval entries per second).
    self.timeout, self.interval, self.message = timeout, max(1., self.count / 64), message
    self.failed_message = failed_message or (
        lambda peer, line: f'error: process {peer} of {self.count} stopped: {line}')
    # failed: this process stops with an error (peers' failures no longer end it); published:
    # its peers were told (the coordinator exiting after reading it is then no loss).
    self.finished = self.failed = self.published = False
    self._lock = threading.Lock()  # One verdict per process: its own error or a peer's.
    self._thread = threading.Thread(target=self._run, name='PeerWatchdog', daemon=True)

  @property
  def _watching(self) -> bool:
    return self.client is not None and self.count > 1

  def start(self) -> 'PeerWatchdog':
    if self._watching:
      self._thread.start()
    return self

  def stop(self) -> None:
    """Marks this process as finished, so that peers still exporting do not report it lost."""
    self.finished = True
    if self._watching:
      try:
        self.client.key_value_set(f'{self.PREFIX}{self.me}', 'done', allow_overwrite=True)
      except Exception:  # The coordinator already shut down: nobody is left to watch.
        pass

  def settle(self) -> None:
    """Called with an error in flight (a collective that failed because a peer vanished, e.g.
    gloo's 'Connection closed by peer'): waits up to the timeout for the watchdog's verdict, so a
    lost peer ends the run with its one line instead of a traceback; otherwise returns."""
    if self._thread.is_alive():
      self._thread.join(self.timeout + 5 * self.interval)

  def fail(self, line: str) -> None:
    """Tells the other processes that this one stops with an error (`line`), so they stop too.

    Returns once every peer has read it (or finished, or failed itself), at most after the
    timeout; a peer lost meanwhile ends this process with the lost line and `EXIT_PEER_LOST`
    (the error may be its consequence). Single-process: no-op.
    """
    with self._lock:
      self.failed = True
    if not self._watching:
      return
    try:
      self.client.key_value_set(f'{self.FAILED_PREFIX}{self.me}', line[:500],
                                allow_overwrite=True)
      self.published = True
    except Exception:  # The coordinator is gone (so is process 0): the watchdog names it.
      self.settle()
      return
    self._wait_for_peers_to_leave()

  def _wait_for_peers_to_leave(self) -> None:
    """Waits (at most the timeout) until every peer read a failure (or finished or failed).

    Process 0 holds JAX's coordination service and leaves last: a process whose coordinator
    disappears is aborted by JAX (SIGABRT, a thread dump) before it can print its line.
    """
    deadline = time.monotonic() + self.timeout
    while time.monotonic() < deadline:
      try:
        alive = dict(self.client.key_value_dir_get(self.PREFIX))
        failed = dict(self.client.key_value_dir_get(self.FAILED_PREFIX))
      except Exception:  # The coordinator has exited.
        return
      if all(peer == self.me or alive.get(f'{self.PREFIX}{peer}') in ('done', self.STOPPED)
             or f'{self.FAILED_PREFIX}{peer}' in failed for peer in range(self.count)):
        break
      time.sleep(self.interval / 4)
    if self.me == 0:
      time.sleep(self.LEAVE_GRACE_S)  # The others exit right after saying they read it.

  def _run(self) -> None:
    beats, last_change = {}, {}
    for beat in range(1 << 62):
      if self.finished:
        return
      now = time.monotonic()
      try:
        self.client.key_value_set(f'{self.PREFIX}{self.me}', str(beat), allow_overwrite=True)
        values = dict(self.client.key_value_dir_get(self.PREFIX))
        failed = dict(self.client.key_value_dir_get(self.FAILED_PREFIX))
      except Exception as e:  # The coordination service (in process 0) is gone.
        if not self.published:  # Else process 0 read this one's failure and exited: expected.
          self._lost(0, f'the coordinator stopped answering ({str(e).splitlines()[0][:120]})')
        return
      for peer in range(self.count):
        if peer != self.me and f'{self.FAILED_PREFIX}{peer}' in failed and not self.failed:
          self._peer_failed(peer, failed[f'{self.FAILED_PREFIX}{peer}'])
          return
      for peer in range(self.count):
        value = values.get(f'{self.PREFIX}{peer}')
        if (peer == self.me or value in ('done', self.STOPPED)
            or f'{self.FAILED_PREFIX}{peer}' in failed):
          continue
        if value != beats.get(peer) or peer not in last_change:
          beats[peer], last_change[peer] = value, now
        elif now - last_change[peer] > self.timeout:
          self._lost(peer, f'no heartbeat for {self.timeout:g} s')
          return
      time.sleep(self.interval)

  def _exit_with(self, line: str, code: int, *, unless_failed: bool = False) -> None:
    """Prints `line` and ends the process, unless it finished (or failed) already."""
    with self._lock:
      if self.finished or (unless_failed and self.failed):
        return
      print(line, file=sys.stderr, flush=True)
      exit_now(code)

  def _lost(self, peer: int, why: str) -> None:
    self._exit_with(self.message(peer, why), EXIT_PEER_LOST)

  def _peer_failed(self, peer: int, line: str) -> None:
    try:  # Read: the failed process may exit now without waiting for this one.
      self.client.key_value_set(f'{self.PREFIX}{self.me}', self.STOPPED, allow_overwrite=True)
    except Exception:
      pass
    if self.me == 0:
      self._wait_for_peers_to_leave()
    self._exit_with(self.failed_message(peer, line), EXIT_PEER_FAILED, unless_failed=True)


def exit_now(code: int) -> None:
  """Flushes the logs and ends the process at once, skipping JAX's shutdown barrier and the
  interpreter's teardown (seconds of destroying TensorFlow's and JAX's objects).

  For a multi-process run that stops with an error the barrier would wait for peers that are
  exiting too (or are gone), then abort with a thread dump; a run that is done passes it first.
  """
  python_logging.shutdown()
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)


def barrier(name: str) -> None:
  """Waits until every process got here (no-op with one process): after process 0 writes a file
  the others read, e.g. `params.npz` that stage 2 fine-tunes."""
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # Only for multi-process runs.
    multihost_utils.sync_global_devices(name)


def _on_managed_cluster() -> bool:
  """True under SLURM with several tasks or on a multi-host TPU VM (JAX detects the rest)."""
  slurm_tasks = int(os.environ.get('SLURM_NTASKS', '1'))
  tpu_hosts = os.environ.get('TPU_WORKER_HOSTNAMES', '')
  return slurm_tasks > 1 or tpu_hosts.count(',') > 0


def make_mesh(devices: Optional[Any] = None) -> Mesh:
  """A 1-D 'data' mesh over all devices (Auto axis type, so replicated params just work)."""
  devices = np.asarray(jax.devices() if devices is None else devices)
  return Mesh(devices.reshape(-1), (DATA_AXIS,),
              axis_types=(jax.sharding.AxisType.Auto,))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def data_sharded(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P(DATA_AXIS))


def fsdp_sharding(shape: Tuple[int, ...], dtype: Any, mesh: Mesh) -> NamedSharding:
  """big_vision's FSDP rule: split the largest dimension that the device count divides.

  Arrays smaller than `FSDP_MIN_BYTES`, or with no such dimension, stay replicated.
  """
  size = mesh.devices.size
  if size == 1 or int(np.prod(shape)) * np.dtype(dtype).itemsize < FSDP_MIN_BYTES:
    return replicated(mesh)
  for axis in sorted(range(len(shape)), key=lambda i: -shape[i]):  # Largest first; stable.
    if shape[axis] % size == 0:
      return NamedSharding(mesh, P(*[DATA_AXIS if i == axis else None
                                     for i in range(len(shape))]))
  return replicated(mesh)


def state_shardings(abstract: Any, mesh: Mesh, mode: str) -> Any:
  """Shardings of a train state (a tree of shaped leaves): all replicated, or per `fsdp_sharding`.

  The same rule for params, their optimizer moments and their average, so the update needs no
  communication beyond the gradient's reduce-scatter and the params' all-gather.
  """
  if config_lib.check_choice('param_sharding', mode) == 'replicated':
    return jax.tree.map(lambda _: replicated(mesh), abstract)
  return jax.tree.map(lambda x: fsdp_sharding(x.shape, x.dtype, mesh), abstract)


def check_batch_size(global_batch: int, mesh: Mesh, accum_steps: int = 1,
                     name: str = 'batch') -> None:
  """Global batch must split evenly into devices × accumulation steps (and processes)."""
  parts = mesh.devices.size * max(accum_steps, 1)
  if global_batch <= 0 or global_batch % parts or global_batch % jax.process_count():
    raise ValueError(
        f'{name}={global_batch} is not divisible by {mesh.devices.size} devices x '
        f'{max(accum_steps, 1)} accum_steps (= {parts}); choose a multiple of {parts}.')


def put_batch(batch: Mapping[str, np.ndarray], mesh: Mesh) -> Mapping[str, jax.Array]:
  """Host-local numpy slices → global arrays sharded over the 'data' axis."""
  sharding = data_sharded(mesh)
  return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v))
          for k, v in batch.items()}


def put_replicated(tree: Any, mesh: Mesh) -> Any:
  """Same value on every device (each process passes its identical host copy)."""
  return jax.device_put(tree, replicated(mesh))


def to_host(tree: Any) -> Any:
  """Global arrays → numpy on every process.

  A replicated array is read from this process's own copy; a sharded one spread over several
  processes is gathered (a collective: every process must call this, in the same order).
  """
  def fetch(x):
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
      if x.is_fully_replicated:
        return np.asarray(x.addressable_data(0))
      from jax.experimental import multihost_utils  # Only for multi-process runs.
      return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(jax.device_get(x))
  return jax.tree.map(fetch, tree)


def device_prefetch(batches: Iterator[Mapping[str, np.ndarray]], mesh: Mesh,
                    size: int) -> Iterator[Tuple[Mapping[str, jax.Array], float]]:
  """Keeps `size` batches already on device; yields (batch, seconds spent waiting for data)."""
  queue = []
  while True:
    while len(queue) < max(size, 1):
      start = time.perf_counter()
      host = next(batches)
      queue.append((put_batch(host, mesh), time.perf_counter() - start))
    yield queue.pop(0)
