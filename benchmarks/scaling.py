r"""Train-step throughput on 1, 2 and 4 (forced) CPU devices: one code path, N devices.

Usage:
  python benchmarks/scaling.py [--model=ViT-Ti_16] [--image=96] [--batch=32] [--steps=5]
Each device count runs in its own process (XLA_FLAGS=--xla_force_host_platform_device_count=N).
Note: forced CPU devices share the same physical cores, so on a 2-core machine more devices
cannot be faster; this checks that the sharded step runs and what the split costs. On GPUs/TPUs
the same code spreads the batch over real devices.
"""

import json
import os
import subprocess
import sys
import time

from absl import app
from absl import flags

_MODEL = flags.DEFINE_string('model', 'ViT-Ti_16', 'ViT preset name.')
_IMAGE = flags.DEFINE_integer('image', 96, 'Square image side in pixels.')
_BATCH = flags.DEFINE_integer('batch', 32, 'Images per step.')
_STEPS = flags.DEFINE_integer('steps', 5, 'Timed steps per device count (after compiling).')
_DEVICES = flags.DEFINE_list('devices', ['1', '2', '4'], 'Forced CPU device counts, one process '
                             'each.')

WORKER = r'''
import json, sys, time
import jax, jax.numpy as jnp, numpy as np
from vit_jax import config_lib, models, train
from vit_jax.training import optim, parallel
from vit_jax.training import settings
model_name, image, batch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
config = config_lib.with_model(config_lib.get_config(), model_name)
config.update(dict(accum_steps=1, optim_dtype='float32'))
mesh = parallel.make_mesh()
model = models.get_model(config.model, num_classes=1000)
tx = optim.make_optimizer(settings.optimizer(config), optim.learning_rate_schedule(
    total_steps=100, base_lr=0.01, decay_type='cosine', warmup_steps=1))
params = jax.jit(lambda: model.init(jax.random.key(0), jnp.zeros((1, image, image, 3)),
                                    train=False)['params'])()
state = parallel.put_replicated({'params': params, 'opt_state': tx.init(params),
                                 'step': jnp.zeros((), jnp.int32),
                                 'rng': jax.random.key_data(jax.random.key(0))}, mesh)
data = parallel.put_batch({'image': np.zeros((batch, image, image, 3), np.float32),
                           'label': np.eye(1000, dtype=np.float32)[np.zeros(batch, int)]}, mesh)
step = train.make_train_step(model, tx, settings.read(config), mesh)
start = time.perf_counter(); state, m = step(state, data); jax.block_until_ready(m)
compile_s = time.perf_counter() - start
times = []
for _ in range(steps):
  start = time.perf_counter(); state, m = step(state, data); jax.block_until_ready(m)
  times.append(time.perf_counter() - start)
print(json.dumps({'devices': jax.device_count(), 'compile_s': compile_s,
                  'step_s': float(np.median(times)), 'img_s': batch / float(np.median(times))}))
'''


def run(devices: int) -> dict:
  env = dict(os.environ, XLA_FLAGS=f'--xla_force_host_platform_device_count={devices}',
             JAX_PLATFORMS='cpu')
  out = subprocess.run([sys.executable, '-c', WORKER, _MODEL.value, str(_IMAGE.value),
                        str(_BATCH.value), str(_STEPS.value)], env=env, capture_output=True,
                       text=True, check=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments {argv[1:]}.')
  print(f'{_MODEL.value} train step, batch {_BATCH.value} at {_IMAGE.value}px, '
        f'{os.cpu_count()} CPU cores ({time.strftime("%Y-%m-%d")})')
  print('devices  compile_s  step_s(median)  img/s  vs 1 device')
  base = None
  for devices in (int(d) for d in _DEVICES.value):
    r = run(devices)
    base = base or r['img_s']
    print(f'{r["devices"]:7d}  {r["compile_s"]:9.1f}  {r["step_s"]:14.3f}  {r["img_s"]:5.1f}  '
          f'{r["img_s"] / base:10.2f}x')
  print('Forced CPU devices share the same cores: expect <= 1x here; the point is one code path.')


if __name__ == '__main__':
  app.run(main)
