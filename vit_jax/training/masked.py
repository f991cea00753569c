"""Self-supervised trainers (`config.trainer` 'mpp' or 'mae'): what they change in the loop.

The supervised loop (`train.train_and_evaluate`) runs them unchanged (resume, devices and
processes, fsdp, the non-finite guard, progress, TensorBoard, SIGTERM); a trainer only picks
the model (`get_model`: a `models_masked` wrapper around the configured ViT), the loss and the
eval sums (`objective`: the images are their own targets, labels unused) and what is exported
(`params['encoder']`, the supervised ViT's tree without head, described by `description`).
Its settings are a `Masked` (the trainer's name and both methods' fields), not the config.
"""

import dataclasses
from typing import Any, Callable, Dict, Optional, Sequence

import jax
import jax.numpy as jnp

from vit_jax import config_lib
from vit_jax import models
from vit_jax import models_masked
from vit_jax import presets
from vit_jax.training import mae
from vit_jax.training import mpp

TRAINERS = ('mpp', 'mae')
METHODS = {'mpp': 'masked patch prediction (ViT paper, Appendix B.1.2)',
           'mae': 'masked autoencoder (He et al. 2022)'}
# The masks' rng stream: fold_in(step rng, MASK_STREAM); the step rng itself drives dropout.
MASK_STREAM = 1
# Evaluation masks: fold_in(key(seed), EVAL_STREAM), the same at every eval, so losses compare.
EVAL_STREAM = 2**31 - 2


@dataclasses.dataclass(frozen=True)
class Masked:
  """Which trainer a run is (`config.trainer`) and the masked methods' settings.

  Attributes:
    trainer: 'mpp' or 'mae' for the masked trainers; any other trains supervised.
    mpp: masked patch prediction's corruption and target (`config.mpp`).
    mae: the masked autoencoder's mask and decoder (`config.mae`).
    seed: the run's seed (`config.seed`), from which the eval masks derive.
  """
  trainer: str
  mpp: mpp.Settings
  mae: mae.Settings
  seed: int


def is_self_supervised(trainer: str) -> bool:
  """Whether `trainer` (`config.trainer`) is one of the masked trainers."""
  return trainer in TRAINERS


def validate(settings: Masked, model_config: Any, *, crop: int, mixup: float,
             teacher_path: str, pretrained: Callable[[], Any]) -> None:
  """One line per setting the masked trainers cannot honour (before anything is built).

  Beside its own settings it checks what the run would add: a model to pretrain
  (`model_config`, at `crop` pixels), Mixup, a distillation teacher, pretrained weights
  (`pretrained()`: the checkpoint the run would start from, or None; only asked for when the
  trainer is a masked one, as locating it may read a folder's index).
  """
  if not is_self_supervised(settings.trainer):
    return
  name = settings.trainer
  if model_config is None:
    raise ValueError(f'trainer={name} needs a model to pretrain: set config.model (e.g. '
                     'config_lib.with_model(config, "ViT-B_16")).')
  family = presets.family_of(model_config)
  if not presets.record_of(model_config).masked_pretraining:
    raise ValueError(f'trainer={name} pretrains a plain ViT (patches of pixels); the model is '
                     f'a {family}: use a ViT preset or config_lib.small_vit.')
  classifier = model_config.get('classifier', 'token')
  if classifier not in models_masked.UNPOOLED:
    raise ValueError(f'trainer={name} cannot train classifier={classifier!r} (its pooling head '
                     f'sees no loss); use one of {", ".join(models_masked.UNPOOLED)}.')
  if model_config.get('representation_size') is not None:
    raise ValueError(f'trainer={name} exports an encoder without pre_logits; set '
                     '--config.model.representation_size=None.')
  if mixup or teacher_path:
    raise ValueError(f'trainer={name} has no labels to mix or distil; set --config.mixup=0 '
                     "and --config.distill.teacher_path=''.")
  if pretrained():
    raise ValueError(f'trainer={name} pretrains from scratch; set --config.pretrained_dir=\'\' '
                     "and --config.pretrained_path=''.")
  config_lib.check_choice('mpp.target', settings.mpp.target)
  patch = model_config.patches.size[0]
  if name == 'mpp' and settings.mpp.target == 'color_4x4' and patch % mpp.DOWNSIZED_CELLS:
    raise ValueError(f'mpp.target=color_4x4 needs a patch size divisible by 4 (it is {patch}); '
                     'use --config.mpp.target=mean_color.')
  if name == 'mae' and not 0. < settings.mae.mask_ratio < 1.:
    raise ValueError(f'mae.mask_ratio={settings.mae.mask_ratio} must be in (0, 1) (MAE: 0.75).')
  gh, gw = models.token_grid(model_config, (crop, crop))
  where = f' ({gh}x{gw} at pp.crop={crop}, patch {patch})'
  if name == 'mae':
    problem = mae.mask_problem(gh * gw, settings.mae.mask_ratio, where)
  else:
    problem = mpp.corruption_problem(gh * gw, corrupt=settings.mpp.corrupt,
                                     mask=settings.mpp.mask, random=settings.mpp.random,
                                     where=where)
  if problem:
    raise ValueError(problem)


def get_model(settings: Masked, model_config: Any) -> Any:
  """The pretraining model of `settings.trainer` around the headless, unpooled ViT `encoder`
  that `model_config` describes."""
  classifier = models_masked.UNPOOLED[model_config.get('classifier', 'token')]
  encoder = models.get_model(model_config, num_classes=0, classifier=classifier)
  if settings.trainer == 'mpp':
    return models_masked.MaskedPatchPredictor(encoder=encoder, num_outputs=mpp.num_outputs(
        settings.mpp.target, settings.mpp.color_bits, model_config.patches.size[0]))
  return models_masked.MaskedAutoencoder(
      encoder=encoder, decoder_width=settings.mae.decoder_width,
      decoder_depth=settings.mae.decoder_depth, decoder_heads=settings.mae.decoder_heads)


@dataclasses.dataclass(frozen=True)
class Objective:
  """A masked trainer's loss and eval, as the train and eval steps call them.

  Attributes:
    losses: (params, images, rng, train) → (per-image loss, per-image accuracy or None).
    seed: the run's seed, from which the eval masks derive.
  """
  losses: Callable[..., Any]
  seed: int

  def loss(self, params: Any, images: jax.Array, rng: jax.Array) -> jax.Array:
    """The mean training loss of a batch (masks from `rng`)."""
    return self.losses(params, images, rng, True)[0].mean()

  def eval_sums(self, params: Any, batch: Dict[str, jax.Array]) -> Dict[str, jax.Array]:
    """Masked sums as `evaluation.make_eval_step` returns them: 'correct' sums the per-image
    accuracy of MPP's colour targets (NaN where the target is no class: MAE, MPP 'pixels')."""
    rng = jax.random.fold_in(jax.random.key(self.seed), EVAL_STREAM)
    loss, accuracy = self.losses(params, batch['image'], rng, False)
    mask = batch['mask']
    correct = jnp.nan if accuracy is None else jnp.sum(accuracy * mask)
    return {'correct': jnp.asarray(correct, jnp.float32), 'loss': jnp.sum(loss * mask),
            'count': jnp.sum(mask)}


def objective(settings: Masked, model: Any, model_config: Any, mean: Sequence[float],
              std: Sequence[float]) -> Optional[Objective]:
  """The `Objective` of `settings.trainer` for `model` (its encoder described by
  `model_config`, its inputs normalised by `mean` and `std`), or None for the supervised
  trainers."""
  if not is_self_supervised(settings.trainer):
    return None
  patch = model_config.patches.size[0]
  mean, std = jnp.asarray(mean), jnp.asarray(std)
  mpp_settings, mae_settings = settings.mpp, settings.mae

  def mpp_losses(params, images, rng, train):
    n, h, w, _ = images.shape
    kind, source = mpp.corruption_plan(
        jax.random.fold_in(rng, MASK_STREAM), n, (h // patch) * (w // patch),
        corrupt=mpp_settings.corrupt, mask=mpp_settings.mask, random=mpp_settings.random)
    outputs = model.apply({'params': params}, images, train=train, kind=kind, source=source,
                          rngs={'dropout': rng})
    loss, correct = mpp.patch_losses(outputs, images, images * std + mean, patch=patch,
                                     target=mpp_settings.target, bits=mpp_settings.color_bits)
    chosen = (kind != models_masked.UNTOUCHED).astype(jnp.float32)
    count = jnp.maximum(chosen.sum(axis=1), 1.)
    return ((loss * chosen).sum(axis=1) / count,
            None if correct is None else (correct * chosen).sum(axis=1) / count)

  def mae_losses(params, images, rng, train):
    n, h, w, _ = images.shape
    keep = mae.visible_patches(jax.random.fold_in(rng, MASK_STREAM), n,
                               (h // patch) * (w // patch), mae_settings.mask_ratio)
    predictions = model.apply({'params': params}, images, train=train, keep=keep,
                              rngs={'dropout': rng})
    return mae.reconstruction_loss(predictions, images, keep, patch=patch,
                                   norm_pix_loss=mae_settings.norm_pix_loss), None

  return Objective(mpp_losses if settings.trainer == 'mpp' else mae_losses, settings.seed)


def encoder_params(trainer: str, params: Any) -> Any:
  """What a run of `trainer` exports: the encoder's tree for the masked trainers, else
  `params`."""
  return params['encoder'] if is_self_supervised(trainer) else params


def description(settings: Masked, steps: int, result: Dict[str, Any], *, batch: int,
                dataset: str, split: str) -> Dict[str, Any]:
  """metadata.json's `self_supervised` entry: how the encoder was pretrained (`steps` of
  `batch` images of `split` of `dataset`)."""
  method = settings.trainer
  fields = dataclasses.asdict(getattr(settings, method))
  return dict(method=method, name=METHODS[method], steps=steps, batch=batch,
              dataset=dataset, split=split, labels_used=False,
              settings=fields, loss_test=result.get('loss'))
