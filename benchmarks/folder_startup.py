"""Start-up of a directory dataset: seconds to DatasetInfo, then to the first train batch.

  python benchmarks/folder_startup.py /path/to/dataset  # with train/<class>/*.jpg
"""

import time

from absl import app

from vit_jax import config_lib
from vit_jax import input_pipeline
from vit_jax.training import settings


def main(argv) -> None:
  if len(argv) != 2:
    raise app.UsageError('Give one dataset folder (with train/<class>/*.jpg).')
  root = argv[1]
  config = config_lib.with_dataset(config_lib.get_config(), 'cifar10')
  config.update(dict(dataset=root, batch=128))
  config.pp.crop = 224
  start = time.perf_counter()
  info = input_pipeline.get_dataset_info(settings.data(config))
  listed = time.perf_counter() - start
  print(f'DatasetInfo after {listed:.1f} s: {info.num_train_examples:,} train + '
        f'{info.num_test_examples:,} test files, {info.num_classes} classes')
  try:
    next(input_pipeline.get_train_data(settings.data(config)))
  except Exception as e:  # noqa: BLE001  # Empty placeholder files cannot make a batch.
    print(f'first batch: {type(e).__name__}: {str(e).splitlines()[0][:160]}')
  print(f'train stream ready / failed after {time.perf_counter() - start:.1f} s')


if __name__ == '__main__':
  app.run(main)
