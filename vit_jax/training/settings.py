"""A training run's config read once, into the settings each part of the run takes.

The one place below `train.py` that reads the ml_collections config (as the official trainer
reads `config.batch` or `config.base_lr` at its top): `read` turns it into a `Run`, whose
fields are plain values and the small frozen dataclasses that the layers owning them define
(`input_pipeline.Data`, `augment.Augment`, `optim.Optimizer`, `distill.Distill`,
`masked.Masked`, `fewshot.FewShot`). Those layers take their dataclass, never the config, so a
reader of the input pipeline or the optimizer finds what they use in their own signature. The
defaults stay where they are written once, in `config_lib.get_config()`; nothing here has any.
"""

import dataclasses
from typing import Any, Optional

from vit_jax import input_pipeline
from vit_jax.data import augment
from vit_jax.training import distill as distill_lib
from vit_jax.training import fewshot as fewshot_lib
from vit_jax.training import mae
from vit_jax.training import masked as masked_lib
from vit_jax.training import mpp
from vit_jax.training import optim
from vit_jax.weights import store


@dataclasses.dataclass(frozen=True)
class Run:
  """What `train.train_and_evaluate` trains, read from its config (field: the config's).

  Attributes:
    trainer: 'train', 'mpp', 'mae', ... (`trainer`).
    seed: init, data order, augmentation and dropout derive from it (`seed`).
    model_config: the model description, a preset's ConfigDict as `models.get_model` and the
      weights layer take it (`model`; None: the pretrained checkpoint's, `from_checkpoint`).
    data: what is read and how (`dataset`, `pp.*`, `batch`, `batch_eval`, data tuning).
    total_steps: training steps, 0 = from `num_epochs` (`total_steps`).
    num_epochs: epochs over the train split when `total_steps` is 0 (`num_epochs`).
    base_lr: the peak learning rate (`base_lr`).
    decay_type: 'cosine' or 'linear' (`decay_type`).
    warmup_steps: linear warmup steps (`warmup_steps`).
    linear_end: the final learning rate of the linear decay (`linear_end`).
    optimizer: the optimizer (`optim`, `grad_norm_clip`, `optim_dtype`, `b1`, `b2`,
      `weight_decay`, `weight_decay_on`).
    accum_steps: gradient accumulation microbatches, 0 = 1 (`accum_steps`).
    loss: 'softmax_xent' or 'sigmoid_xent' (`loss`).
    label_smoothing: the loss's label smoothing (`label_smoothing`).
    mixup: Mixup's alpha over the global batch, 0 = off (`mixup`).
    ema_decay: the weight average's decay, 0 = off (`ema_decay`).
    distill: the distillation teacher and loss (`distill.*`).
    masked: the trainer's name and the masked trainers' settings (`trainer`, `mpp.*`, `mae.*`).
    fewshot: few-shot evaluation during training (`fewshot.*`).
    pretrained_path: an explicit checkpoint to fine-tune (`pretrained_path`).
    pretrained_dir: the folder of <name>.npz (`pretrained_dir`).
    model_or_filename: the file name in it instead of the model's (`model_or_filename`).
    keep_head: keep the checkpoint's head (`keep_head`).
    param_sharding: 'replicated' or 'fsdp' (`param_sharding`).
    progress_every: steps between progress lines (`progress_every`).
    eval_every: steps between evaluations (`eval_every`).
    checkpoint_every: steps between saved train states (`checkpoint_every`).
    keep_checkpoints: saved train states kept (`keep_checkpoints`).
  """
  trainer: str
  seed: int
  model_config: Any
  data: input_pipeline.Data
  total_steps: int
  num_epochs: float
  base_lr: float
  decay_type: str
  warmup_steps: int
  linear_end: float
  optimizer: optim.Optimizer
  accum_steps: int
  loss: str
  label_smoothing: float
  mixup: float
  ema_decay: float
  distill: distill_lib.Distill
  masked: masked_lib.Masked
  fewshot: fewshot_lib.FewShot
  pretrained_path: str
  pretrained_dir: str
  model_or_filename: str
  keep_head: bool
  param_sharding: str
  progress_every: int
  eval_every: int
  checkpoint_every: int
  keep_checkpoints: int

  def pretrained_location(self) -> Optional[store.Location]:
    """The checkpoint the run fine-tunes (`store.pretrained_location`), or None (scratch)."""
    return store.pretrained_location(self.pretrained_path, self.pretrained_dir,
                                     self.model_or_filename, self.model_config)


def read(config: Any) -> Run:
  """The run `config` describes, as the trainer uses it (nothing checked yet: `state`)."""
  return Run(
      trainer=config.trainer, seed=config.seed, model_config=config.model, data=data(config),
      total_steps=config.total_steps, num_epochs=config.num_epochs, base_lr=config.base_lr,
      decay_type=config.decay_type, warmup_steps=config.warmup_steps,
      linear_end=config.linear_end, optimizer=optimizer(config),
      accum_steps=config.accum_steps, loss=config.loss, label_smoothing=config.label_smoothing,
      mixup=config.mixup, ema_decay=config.ema_decay, distill=distill(config),
      masked=masked(config), fewshot=fewshot(config), pretrained_path=config.pretrained_path,
      pretrained_dir=config.pretrained_dir, model_or_filename=config.model_or_filename,
      keep_head=config.keep_head, param_sharding=config.param_sharding,
      progress_every=config.progress_every, eval_every=config.eval_every,
      checkpoint_every=config.checkpoint_every, keep_checkpoints=config.keep_checkpoints)


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


def optimizer(config: Any) -> optim.Optimizer:
  """The optimizer's fields (optim, grad_norm_clip, optim_dtype, b1, b2, weight decay)."""
  return optim.Optimizer(
      name=config.optim, grad_norm_clip=config.grad_norm_clip, dtype=config.optim_dtype,
      b1=config.b1, b2=config.b2, weight_decay=config.weight_decay,
      weight_decay_on=config.weight_decay_on)


def distill(config: Any) -> distill_lib.Distill:
  """The distillation teacher and loss (`distill.*`; teacher_path '' = off)."""
  return distill_lib.Distill(
      teacher_path=config.distill.teacher_path, teacher_model=config.distill.teacher_model,
      kind=config.distill.kind, alpha=config.distill.alpha,
      temperature=config.distill.temperature)


def masked(config: Any) -> masked_lib.Masked:
  """The trainer's name and the masked trainers' settings (`mpp.*`, `mae.*`)."""
  return masked_lib.Masked(
      trainer=config.trainer,
      mpp=mpp.Settings(corrupt=config.mpp.corrupt, mask=config.mpp.mask,
                       random=config.mpp.random, target=config.mpp.target,
                       color_bits=config.mpp.color_bits),
      mae=mae.Settings(mask_ratio=config.mae.mask_ratio, decoder_width=config.mae.decoder_width,
                       decoder_depth=config.mae.decoder_depth,
                       decoder_heads=config.mae.decoder_heads,
                       norm_pix_loss=config.mae.norm_pix_loss),
      seed=config.seed)


def fewshot(config: Any) -> fewshot_lib.FewShot:
  """The few-shot evaluation's datasets, splits, shots, seeds, regularisers and interval."""
  return fewshot_lib.FewShot(
      datasets=config.fewshot.datasets, every=config.fewshot.every, shots=config.fewshot.shots,
      seeds=config.fewshot.seeds, train_split=config.fewshot.train_split,
      test_split=config.fewshot.test_split, l2_regs=config.fewshot.l2_regs,
      holdout=config.fewshot.holdout)
