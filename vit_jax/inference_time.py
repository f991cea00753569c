"""The `inference_time` trainer: images/s/core of a model's forward pass (like the official one).

Unlike the official version it measures the steps it says it measures (`config.steps`, after
`config.initial_steps` warm-up) and runs on the same data mesh as training. As officially, it is
no command of its own: `vit_jax.main` runs it for `config.trainer = 'inference_time'`:

  python -m vit_jax.main --config=configs/inference_time.py --workdir=runs/infer \
      --config.model_name=ViT-B_16 --config.batch=8
"""

import sys
import time
from typing import Any, Dict

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from clu import metric_writers

from vit_jax import models
from vit_jax.training import parallel


def time_calls(fn, *args, steps: int, warmup: int) -> np.ndarray:
  """Seconds per call of `fn(*args)` (blocking), after `warmup` untimed calls."""
  for _ in range(warmup):
    jax.block_until_ready(fn(*args))
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return np.asarray(times)


def inference_time(config: Any, workdir: str) -> Dict[str, float]:
  """Measures forward throughput of `config.model_name` at `config.batch` x `config.image_size`."""
  for field in ('batch', 'num_classes', 'image_size', 'steps'):
    if not config[field]:
      raise ValueError(f'inference_time needs --config.{field} > 0.')
  mesh = parallel.make_mesh()
  parallel.check_batch_size(config.batch, mesh)
  model = models.get_model(config.model_name, num_classes=config.num_classes)
  side = config.image_size
  params = jax.jit(lambda: model.init(jax.random.key(0), jnp.zeros((1, side, side, 3)),
                                      train=False)['params'],
                   out_shardings=parallel.replicated(mesh))()
  images = parallel.put_batch({'x': np.ones((config.batch, side, side, 3), np.float32)},
                              mesh)['x']
  forward = jax.jit(lambda p, x: model.apply({'params': p}, x, train=False))
  start = time.perf_counter()
  jax.block_until_ready(forward(params, images))
  logging.info('Compiled and ran the first step in %.1fs.', time.perf_counter() - start)
  times = time_calls(forward, params, images, steps=config.steps,
                     warmup=config.initial_steps)
  per_core = config.batch / jax.device_count() / times
  result = {'imgs_sec_core_median': float(np.median(per_core)),
            'imgs_sec_core_min': float(per_core.min()), 'imgs_sec_core_max': float(per_core.max()),
            'imgs_sec_core_mean': float(per_core.mean()),
            'imgs_sec_core_std': float(per_core.std())}
  logging.info('%s batch %d at %dpx: %s', config.model_name, config.batch, side, result)
  writer = metric_writers.create_default_writer(workdir, just_logging=jax.process_index() > 0)
  writer.write_scalars(0, result)
  writer.flush()
  return result


if __name__ == '__main__':
  print('inference_time: error: this module is the inference_time trainer, not a command (as in '
        'the official code); run python -m vit_jax.main --config=configs/inference_time.py '
        '--workdir=runs/infer --config.model_name=ViT-B_16 --config.batch=8', file=sys.stderr)
  sys.exit(2)
