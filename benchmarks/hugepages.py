"""Transparent huge pages for malloc: the environment that asks for them, and what they save.

`GLIBC_TUNABLES=glibc.malloc.hugetlb=1` (what scripts/hugepages.sh sets) is read when a process
starts; `with_hugepages`/`without_hugepages` build a child's environment (this benchmark's and
benchmarks/vs_timm.py's workers). Run as a script, it times a CPU training step with and without:

  python benchmarks/hugepages.py --crops=28,42 --repeats=4 --steps=100

Each measurement is a fresh process (the tunable is read at process start) running the
quickstart's ViT (configs/fashion_mnist_quickstart.py, batch 128) on random images: a few
warm-up steps, then `--steps` timed steps; the two settings alternate, so load from other
processes on a shared machine falls on both. Prints wall ms/step, the process's CPU ms/step
(user + system: less sensitive than wall time to other processes on a shared machine; page
faults are system time) and minor page faults per step.
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Dict, Mapping

from absl import app
from absl import flags

QUICKSTART = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'configs',
                          'fashion_mnist_quickstart.py')
TUNABLES = 'GLIBC_TUNABLES'
SETTING = 'glibc.malloc.hugetlb=1'
FLAGS = flags.FLAGS


def define_flags() -> None:
  """Defines the script's flags, when it runs.

  Not at import: absl flags are global, and benchmarks/vs_timm.py and the tests import this
  module for its environment helpers (another module's --steps would clash).
  """
  flags.DEFINE_list('crops', ['28', '42'], 'Image sides to time, in pixels.')
  flags.DEFINE_integer('steps', 100, 'Timed training steps per measurement.')
  flags.DEFINE_integer('warmup', 10, 'Untimed steps before them.')
  flags.DEFINE_integer('repeats', 3, 'Measurements per setting and crop (the order alternates).')
  flags.DEFINE_bool('child', False, 'Internal: measure in this process and print one JSON line.')


def with_hugepages(environ: Mapping[str, str]) -> Dict[str, str]:
  """`environ` asking for huge pages; a glibc.malloc.hugetlb already chosen there is kept."""
  tunables = environ.get(TUNABLES, '')
  if 'glibc.malloc.hugetlb' in tunables:
    return dict(environ)
  return {**environ, TUNABLES: f'{tunables}:{SETTING}' if tunables else SETTING}


def without_hugepages(environ: Mapping[str, str]) -> Dict[str, str]:
  """`environ` with the tunable taken out (the other tunables kept)."""
  kept = [t for t in environ.get(TUNABLES, '').split(':') if t and t != SETTING]
  env = {k: v for k, v in environ.items() if k != TUNABLES}
  return {**env, TUNABLES: ':'.join(kept)} if kept else env


def active(environ: Mapping[str, str]) -> bool:
  """Whether a process with `environ` asks for huge pages."""
  return SETTING in environ.get(TUNABLES, '')


def measure(crop: int, steps: int, warmup: int) -> dict:
  """Runs in the child: steady-state ms and minor faults per training step."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  import optax

  from vit_jax import models
  from vit_jax import train
  from vit_jax.training import optim
  from vit_jax.training import parallel
  from vit_jax.training import settings
  from vit_jax import config_lib
  quickstart = config_lib.load_config_module(QUICKSTART)
  config = quickstart.get_config().pretrain.copy_and_resolve_references()
  config.unlock()
  config.pp.crop = crop
  model = models.get_model(config.model, num_classes=10)
  tx = optim.make_optimizer(settings.optimizer(config), optax.constant_schedule(1e-3))
  mesh = parallel.make_mesh()
  key = jax.random.key(0)
  params = model.init(key, jnp.zeros((1, crop, crop, 3)), train=False)['params']
  state = {'params': params, 'opt_state': tx.init(params), 'step': jnp.zeros((), jnp.int32),
           'rng': jax.random.key_data(key)}
  step = train.make_train_step(model, tx, settings.read(config), mesh)
  rng = np.random.default_rng(0)
  batch = parallel.put_batch({
      'image': rng.normal(size=(config.batch, crop, crop, 3)).astype(np.float32),
      'label': np.eye(10, dtype=np.float32)[rng.integers(0, 10, config.batch)]}, mesh)
  for _ in range(warmup):
    state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  before = resource.getrusage(resource.RUSAGE_SELF)
  start = time.perf_counter()
  for _ in range(steps):
    state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  seconds = time.perf_counter() - start
  after = resource.getrusage(resource.RUSAGE_SELF)
  return {'ms': 1e3 * seconds / steps,
          'cpu_ms': 1e3 * (after.ru_utime + after.ru_stime - before.ru_utime
                           - before.ru_stime) / steps,
          'sys_ms': 1e3 * (after.ru_stime - before.ru_stime) / steps,
          'faults': (after.ru_minflt - before.ru_minflt) / steps}


def run_child(crop: int, steps: int, warmup: int, hugepages: bool) -> dict:
  env = (with_hugepages if hugepages else without_hugepages)(os.environ)
  out = subprocess.run([sys.executable, __file__, '--child', f'--crops={crop}',
                        f'--steps={steps}', f'--warmup={warmup}'], env=env, check=True,
                       capture_output=True, text=True).stdout
  return json.loads(out.strip().splitlines()[-1])


def main(argv) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments {argv[1:]}.')
  crops = [int(c) for c in FLAGS.crops]
  if FLAGS.child:
    print(json.dumps(measure(crops[0], FLAGS.steps, FLAGS.warmup)))
    return
  for crop in crops:
    results = {False: [], True: []}
    for repeat in range(FLAGS.repeats):
      for hugepages in ((False, True) if repeat % 2 == 0 else (True, False)):
        r = run_child(crop, FLAGS.steps, FLAGS.warmup, hugepages)
        results[hugepages].append(r)
        print(f'{crop}px repeat {repeat} hugepages={hugepages}: {r["ms"]:.1f} ms/step, '
              f'cpu {r["cpu_ms"]:.1f} ms/step (sys {r["sys_ms"]:.1f}), '
              f'{r["faults"]:.0f} faults/step', flush=True)
    for hugepages, rs in results.items():
      summary = []
      for key in ('ms', 'cpu_ms', 'sys_ms'):
        values = [r[key] for r in rs]
        summary.append(f'{key} mean {statistics.mean(values):.1f} (min {min(values):.1f}, '
                       f'max {max(values):.1f}, sd {statistics.pstdev(values):.1f})')
      print(f'{crop}px hugepages={hugepages}: {"; ".join(summary)}; faults/step '
            f'{statistics.mean(r["faults"] for r in rs):.0f}', flush=True)


if __name__ == '__main__':
  define_flags()
  app.run(main)
