"""Stage 3 of benchmarks/gpu_e2e.py: the step-only workers, one process per framework.

The parent (`Worker`) starts `python benchmarks/e2e_workers.py KIND SPEC_JSON` for `jax` (the
end-to-end run's own jitted train step, `train.make_train_step`) and `timm` (its
VisionTransformer at the same dimensions); each builds its model, runs one step (the compile)
and then answers commands on stdin, one JSON line each (`worker_pipe`): `block N`
times N steps, `profile N` traces N steps with `jax.profiler` (jax only), `done` reports peak
device memory and exits. Separate processes keep the two frameworks' allocators, threads and
compile caches apart while they take turns on one device.
"""

import json
import os
import sys
import time
from typing import Any, Dict, List

import numpy as np

import timm_vit  # benchmarks/timm_vit.py and worker_pipe.py, beside this script.
import worker_pipe

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKERS = ('jax', 'timm')


class Worker(worker_pipe.Pipe):
  """A worker process (this script, `kind` and `spec` its arguments), timing blocks of steps.

  `env` is the process's environment: the benchmark's XLA_FLAGS, and the repo importable.
  """

  def __init__(self, kind: str, env: Dict[str, str], spec: Dict[str, Any]):
    super().__init__(kind, [sys.executable, os.path.abspath(__file__), kind, json.dumps(spec)],
                     env, cwd=ROOT)
    self.blocks: List[float] = []

  def block(self, steps: int) -> None:
    self.blocks.append(self.ask(f'block {steps}')['seconds'])

  def finish(self) -> Dict[str, Any]:
    return self.close('done')


def apply_overrides(config: Any, overrides: Dict[str, Any]) -> Any:
  """`config` with each dotted field of `overrides` set (as `--config.a.b=v` would)."""
  for dotted, value in overrides.items():
    *parents, name = dotted.split('.')
    node = config
    for part in parents:
      node = node[part]
    node[name] = value
  return config


def _serve(step, sync, peak_mb, profile=None) -> None:
  """Answers the parent's commands: 'block N' (timed steps), 'profile N', 'done'."""
  for line in sys.stdin:
    command, *args = line.split()
    if command == 'block':
      start = time.perf_counter()
      for _ in range(int(args[0])):
        step()
      sync()
      worker_pipe.emit(seconds=time.perf_counter() - start)
    elif command == 'profile':
      worker_pipe.emit(**profile(int(args[0])))
    else:
      worker_pipe.emit(peak_memory_mb=peak_mb())
      return


def _files_under(folder: str) -> List[str]:
  return [os.path.join(d, f) for d, _, files in os.walk(folder) for f in files]


def jax_worker(spec: Dict[str, Any]) -> None:
  """The end-to-end run's own jitted train step on one synthetic batch on the device."""
  import jax  # noqa: PLC0415
  from vit_jax import config_lib, train  # noqa: PLC0415
  from vit_jax.tools import flops  # noqa: PLC0415
  from vit_jax.training import parallel, state as state_lib  # noqa: PLC0415
  from vit_jax.training import settings  # noqa: PLC0415
  path, arg = spec['config'].split(':', 1)
  config = apply_overrides(config_lib.load_config_module(path).get_config(arg),
                           spec['overrides'])
  trainer = state_lib.build_trainer(settings.read(config), needs_pretrained=False)
  state = {'now': state_lib.init_state(trainer)}
  step_fn = train.make_train_step(trainer.model, trainer.tx, settings.read(config), trainer.mesh,
                                  state_lib.state_shardings(trainer))
  rng = np.random.default_rng(0)
  b, crop, classes = spec['batch'], spec['crop'], trainer.info.num_classes
  images = (rng.integers(0, 256, (b, crop, crop, 3), np.uint8) if config.pp.uint8_batches
            else rng.uniform(-1, 1, (b, crop, crop, 3)).astype(np.float32))  # As the pipeline's.
  batch = parallel.put_batch({
      'image': images,
      'label': np.eye(classes, dtype=np.float32)[np.arange(b) % classes]}, trainer.mesh)

  def step():
    state['now'], _ = step_fn(state['now'], batch)

  def sync():
    jax.block_until_ready(state['now'])

  def profile(steps: int) -> Dict[str, Any]:
    """The trace's files; a profiler that cannot start (no CUPTI) is reported, not fatal."""
    before = set(_files_under(spec['profile_dir']))
    try:
      with jax.profiler.trace(spec['profile_dir']):
        for _ in range(steps):
          step()
        sync()
    except Exception as e:  # noqa: BLE001  # The timings are taken: keep them.
      return {'trace': [], 'trace_error': f'{type(e).__name__}: {e}'}
    return {'trace': sorted(set(_files_under(spec['profile_dir'])) - before)}

  def peak_mb():
    stats = jax.local_devices()[0].memory_stats()
    return stats['peak_bytes_in_use'] / 2**20 if stats and 'peak_bytes_in_use' in stats else None
  start = time.perf_counter()
  step()
  sync()
  device = jax.devices()[0]
  worker_pipe.emit(first_step_s=time.perf_counter() - start, devices=jax.device_count(),
        device=device.device_kind,  # 'cpu', or e.g. 'NVIDIA H100 80GB HBM3'.
        train_flops_per_image=3. * flops.count_flops(config.model, crop, classes)['total'])
  _serve(step, sync, peak_mb, profile)


def timm_worker(spec: Dict[str, Any]) -> None:
  """timm's VisionTransformer with the same dimensions, batch and optimiser (torch only)."""
  import torch  # noqa: PLC0415
  device = 'cuda' if torch.cuda.is_available() else 'cpu'
  b, crop = spec['batch'], spec['crop']
  model = timm_vit.build(spec['timm'], crop, spec['classes'], device)
  model = model.to(memory_format=torch.channels_last).train()
  forward = torch.compile(model) if spec['torch_compile'] else model
  x, y = timm_vit.batch(b, crop, spec['classes'], device)
  x = x.to(memory_format=torch.channels_last)
  opt = timm_vit.optimizer(model)
  mixed = timm_vit.autocast(device, spec['dtype'])
  step = lambda: timm_vit.train_step(model, forward, x, y, opt, mixed)  # noqa: E731

  def sync():
    if device == 'cuda':
      torch.cuda.synchronize()
  start = time.perf_counter()
  step()
  sync()
  worker_pipe.emit(first_step_s=time.perf_counter() - start, torch=torch.__version__,
        device='cpu' if device == 'cpu' else f'cuda:{torch.cuda.get_device_name()}')
  _serve(step, sync, lambda: (torch.cuda.max_memory_allocated() / 2**20
                              if device == 'cuda' else None))


def main(argv: List[str]) -> int:
  """`e2e_workers.py KIND SPEC_JSON`: serves as that worker until the parent says `done`."""
  if len(argv) != 3 or argv[1] not in WORKERS:
    print(f'e2e_workers: error: use e2e_workers.py {{{"|".join(WORKERS)}}} SPEC_JSON (started '
          'by benchmarks/gpu_e2e.py, not by hand).', file=sys.stderr)
    return 1
  {'jax': jax_worker, 'timm': timm_worker}[argv[1]](json.loads(argv[2]))
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
