"""The 1-D data-parallel mesh over every device of every process, and moving data onto it.

One code path for 1 device, N local devices and N processes: batches are sharded over the 'data'
axis (`P('data')`), each process contributing only its local slice of a global batch. Params,
optimizer state and weight average are replicated (`P()`), or with `param_sharding='fsdp'` split
over the same axis (`fsdp_sharding`), so each device holds 1/N of them.
"""

import os
from typing import Any, Mapping, Optional, Tuple

import jax
import numpy as np
from absl import logging
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

DATA_AXIS = 'data'
PARAM_SHARDINGS = ('replicated', 'fsdp')
# Arrays below this stay replicated under 'fsdp': 1-D biases and norms (<= 20 KiB even in ViT-H)
# would cost a collective each and save nothing; every ViT kernel (>= 144 KiB) is above it.
FSDP_MIN_BYTES = 64 * 1024


def maybe_initialize_distributed(coordinator_address: Optional[str] = None,
                                 num_processes: Optional[int] = None,
                                 process_id: Optional[int] = None) -> None:
  """Starts JAX's distributed runtime when the run is launched as several processes.

  Explicit arguments win; otherwise JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES /
  JAX_PROCESS_ID; otherwise JAX's own auto-detection on TPU pods and SLURM. A plain single
  process run does nothing.
  """
  address = coordinator_address or os.environ.get('JAX_COORDINATOR_ADDRESS')
  if address:
    num = num_processes if num_processes is not None else int(os.environ['JAX_NUM_PROCESSES'])
    pid = process_id if process_id is not None else int(os.environ['JAX_PROCESS_ID'])
    # Cross-process collectives on CPU (tests, CPU clusters); GPUs/TPUs use their own.
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
    jax.distributed.initialize(coordinator_address=address, num_processes=num, process_id=pid)
  elif _on_managed_cluster():
    jax.distributed.initialize()
  logging.info('JAX process %d / %d, %d local / %d global devices', jax.process_index(),
               jax.process_count(), jax.local_device_count(), jax.device_count())


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
  if mode not in PARAM_SHARDINGS:
    raise ValueError(f'Unknown param_sharding={mode!r}; use one of {", ".join(PARAM_SHARDINGS)}.')
  if mode == 'replicated':
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
