r"""Memory per device and train-step time: param_sharding='replicated' against 'fsdp'.

Usage:
  python benchmarks/param_sharding.py [--model=ViT-Ti_16] [--image=96] [--batch=32] [--steps=5]
One process with 4 forced CPU devices (--devices), adamw in float32, the same `make_train_step`
as training. Forced CPU devices share the machine's cores and memory and have no interconnect:
the timings show that the sharded step runs and what its collectives cost on CPU, not what they
cost on GPUs/TPUs.
"""

import json
import time

from absl import app
from absl import flags

_MODEL = flags.DEFINE_string('model', 'ViT-Ti_16', 'ViT preset name.')
_IMAGE = flags.DEFINE_integer('image', 96, 'Square image side in pixels.')
_BATCH = flags.DEFINE_integer('batch', 32, 'Images per step.')
_STEPS = flags.DEFINE_integer('steps', 5, 'Timed steps per mode (after one untimed).')
_DEVICES = flags.DEFINE_integer('devices', 4, 'Forced CPU devices.')


def measure(mode: str, model_name: str, image: int, batch: int, steps: int) -> dict:
  """State bytes on device 0, the compiled step's per-device buffers, and the median step time."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from vit_jax import config_lib, models, train
  from vit_jax.training import optim, parallel
  from vit_jax.training import settings
  config = config_lib.with_model(config_lib.get_config(), model_name)
  config.update(dict(accum_steps=1, optim='adamw', optim_dtype='float32', param_sharding=mode))
  mesh = parallel.make_mesh()
  model = models.get_model(config.model, num_classes=1000)
  tx = optim.make_optimizer(settings.optimizer(config), optim.learning_rate_schedule(
      total_steps=100, base_lr=1e-3, decay_type='cosine', warmup_steps=1))

  def make_state():
    params = model.init(jax.random.key(0), jnp.zeros((1, image, image, 3)),
                        train=False)['params']
    return {'params': params, 'opt_state': tx.init(params), 'step': jnp.zeros((), jnp.int32),
            'rng': jax.random.key_data(jax.random.key(0))}

  shardings = parallel.state_shardings(jax.eval_shape(make_state), mesh, mode)
  state = jax.jit(make_state, out_shardings=shardings)()
  leaves = jax.tree.leaves((state['params'], state['opt_state']))
  device0 = sum(x.addressable_shards[0].data.nbytes for x in leaves)  # Before donation.
  data = parallel.put_batch({
      'image': np.zeros((batch, image, image, 3), np.float32),
      'label': np.eye(1000, dtype=np.float32)[np.zeros(batch, int)]}, mesh)
  step = train.make_train_step(model, tx, settings.read(config), mesh, shardings)
  # make_train_step returns a closure over its jitted step (it passes the teacher's params):
  # jit it again, with the same donation, to compile the same program and read its buffers.
  memory = jax.jit(step, donate_argnums=(0,)).lower(state, data).compile().memory_analysis()
  state, metrics = step(state, data)
  jax.block_until_ready(metrics)
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    state, metrics = step(state, data)
    jax.block_until_ready(metrics)
    times.append(time.perf_counter() - start)
  return {'mode': mode, 'devices': jax.device_count(),
          'state_MiB_device0': device0 / 2**20,
          'state_MiB_total': sum(x.size * x.dtype.itemsize for x in leaves) / 2**20,
          'step_temp_MiB': getattr(memory, 'temp_size_in_bytes', 0) / 2**20,
          'step_s': float(np.median(times)), 'loss': float(metrics['loss'])}


def main(argv) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments {argv[1:]}.')
  import jax  # After parsing: the device count must be set before the backend starts.
  jax.config.update('jax_platforms', 'cpu')
  jax.config.update('jax_num_cpu_devices', _DEVICES.value)
  for mode in ('replicated', 'fsdp'):
    print(json.dumps(measure(mode, _MODEL.value, _IMAGE.value, _BATCH.value, _STEPS.value)))


if __name__ == '__main__':
  app.run(main)
