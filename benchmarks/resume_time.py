"""Seconds to the first train batch after resuming at given steps (input pipeline only).

  python benchmarks/resume_time.py --dataset=fashion_mnist --tfds_data_dir=DIR \
      --steps=0,20000,1000000
"""

import argparse
import time

from vit_jax import config_lib
from vit_jax import input_pipeline


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--dataset', default='fashion_mnist')
  parser.add_argument('--tfds_data_dir', default=None)
  parser.add_argument('--steps', default='0,20000,1000000')
  parser.add_argument('--batch', type=int, default=128)
  args = parser.parse_args()
  config = config_lib.with_dataset(config_lib.get_config(), 'fashion_mnist')
  config.update(dict(dataset=args.dataset, tfds_data_dir=args.tfds_data_dir, batch=args.batch))
  for step in (int(s) for s in args.steps.split(',')):
    start = time.perf_counter()
    next(input_pipeline.get_train_data(config, start_batch=step))
    print(f'resume at step {step:>9,}: first batch after {time.perf_counter() - start:.2f} s')


if __name__ == '__main__':
  main()
