"""A training run's config read once, into the settings each part of the run takes.

The one place below `train.py` that reads the ml_collections config (as the official trainer
reads `config.batch` or `config.base_lr` at its top): every function here turns config fields
into a small frozen dataclass that the layer owning it defines (`input_pipeline.Data`,
`augment.Augment`, ...). Those layers take the dataclasses, never the config, so a reader of
the input pipeline or the optimizer finds what they use in their own signature. The defaults
stay where they are written once, in `config_lib.get_config()`; nothing here has any.
"""

from typing import Any

from vit_jax import input_pipeline
from vit_jax.data import augment
from vit_jax.training import fewshot as fewshot_lib


def data(config: Any) -> input_pipeline.Data:
  """What the run reads and how (the dataset, pp.*, batch sizes, seed and data tuning fields)."""
  return input_pipeline.Data(
      dataset=config.dataset, tfds_data_dir=config.tfds_data_dir,
      tfds_manual_dir=config.tfds_manual_dir, sharding=config.data_sharding,
      train=config.pp.train, test=config.pp.test, val=config.pp.val,
      train_eval=config.pp.train_eval, crop=config.pp.crop, mean=config.pp.mean,
      std=config.pp.std, uint8_batches=config.pp.uint8_batches, augment=augmentation(config),
      batch=config.batch, batch_eval=config.batch_eval, shuffle_buffer=config.shuffle_buffer,
      seed=config.seed, prefetch=config.prefetch, autotune=config.data_autotune)


def augmentation(config: Any) -> augment.Augment:
  """How training images are augmented (pp.train_aug, area_min, randaug, random_erase)."""
  return augment.Augment(
      kind=config.pp.train_aug, area_min=config.pp.area_min,
      randaug_layers=config.pp.randaug.num_layers,
      randaug_magnitude=config.pp.randaug.magnitude, random_erase=config.pp.random_erase)


def fewshot(config: Any) -> fewshot_lib.FewShot:
  """The few-shot evaluation's datasets, splits, shots, seeds, regularisers and interval."""
  return fewshot_lib.FewShot(
      datasets=config.fewshot.datasets, every=config.fewshot.every, shots=config.fewshot.shots,
      seeds=config.fewshot.seeds, train_split=config.fewshot.train_split,
      test_split=config.fewshot.test_split, l2_regs=config.fewshot.l2_regs,
      holdout=config.fewshot.holdout)
