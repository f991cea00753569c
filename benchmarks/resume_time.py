"""Seconds to the first train batch after resuming at given steps (input pipeline only).

  python benchmarks/resume_time.py --dataset=fashion_mnist --tfds_data_dir=DIR \
      --steps=0,20000,1000000
"""

import time

from absl import app
from absl import flags

from vit_jax import config_lib
from vit_jax import input_pipeline
from vit_jax.training import settings

_DATASET = flags.DEFINE_string('dataset', 'fashion_mnist', 'TFDS name or image folder.')
_TFDS_DATA_DIR = flags.DEFINE_string('tfds_data_dir', None, 'TFDS data directory (default: '
                                     "TFDS's own).")
_STEPS = flags.DEFINE_list('steps', ['0', '20000', '1000000'], 'Train steps to resume at.')
_BATCH = flags.DEFINE_integer('batch', 128, 'Images per batch.')


def main(argv) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments {argv[1:]}.')
  config = config_lib.with_dataset(config_lib.get_config(), 'fashion_mnist')
  config.update(dict(dataset=_DATASET.value, tfds_data_dir=_TFDS_DATA_DIR.value,
                     batch=_BATCH.value))
  for step in (int(s) for s in _STEPS.value):
    start = time.perf_counter()
    next(input_pipeline.get_train_data(settings.data(config), start_batch=step))
    print(f'resume at step {step:>9,}: first batch after {time.perf_counter() - start:.2f} s')


if __name__ == '__main__':
  app.run(main)
