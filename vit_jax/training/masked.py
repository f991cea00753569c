"""Self-supervised trainers (`config.trainer` 'mpp' or 'mae'): what they change in the loop.

The supervised loop (`train.train_and_evaluate`) runs them unchanged (resume, devices and
processes, fsdp, the non-finite guard, progress, TensorBoard, SIGTERM); a trainer only picks
the model (`get_model`: a `models_masked` wrapper around the configured ViT), the loss and the
eval sums (`objective`: the images are their own targets, labels unused) and what is exported
(`params['encoder']`, the supervised ViT's tree without head, described by `description`).
"""

import dataclasses
from typing import Any, Callable, Dict, Optional

import jax
import jax.numpy as jnp

from vit_jax import config_lib
from vit_jax import models
from vit_jax import models_masked
from vit_jax import presets
from vit_jax.weights import store
from vit_jax.training import mae
from vit_jax.training import mpp

TRAINERS = ('mpp', 'mae')
METHODS = {'mpp': 'masked patch prediction (ViT paper, Appendix B.1.2)',
           'mae': 'masked autoencoder (He et al. 2022)'}
# The masks' rng stream: fold_in(step rng, MASK_STREAM); the step rng itself drives dropout.
MASK_STREAM = 1
# Evaluation masks: fold_in(key(seed), EVAL_STREAM), the same at every eval, so losses compare.
EVAL_STREAM = 2**31 - 2


def is_self_supervised(config: Any) -> bool:
  return config.trainer in TRAINERS


def validate(config: Any) -> None:
  """One line per setting the masked trainers cannot honour (before anything is built)."""
  if not is_self_supervised(config):
    return
  name = config.trainer
  if config.model is None:
    raise ValueError(f'trainer={name} needs a model to pretrain: set config.model (e.g. '
                     'config_lib.with_model(config, "ViT-B_16")).')
  family = presets.family_of(config.model)
  if not presets.record_of(config.model).masked_pretraining:
    raise ValueError(f'trainer={name} pretrains a plain ViT (patches of pixels); the model is '
                     f'a {family}: use a ViT preset or config_lib.small_vit.')
  classifier = config.model.get('classifier', 'token')
  if classifier not in models_masked.UNPOOLED:
    raise ValueError(f'trainer={name} cannot train classifier={classifier!r} (its pooling head '
                     f'sees no loss); use one of {", ".join(models_masked.UNPOOLED)}.')
  if config.model.get('representation_size') is not None:
    raise ValueError(f'trainer={name} exports an encoder without pre_logits; set '
                     '--config.model.representation_size=None.')
  if config.mixup or config.distill.teacher_path:
    raise ValueError(f'trainer={name} has no labels to mix or distil; set --config.mixup=0 '
                     "and --config.distill.teacher_path=''.")
  if store.pretrained_path(config):
    raise ValueError(f'trainer={name} pretrains from scratch; set --config.pretrained_dir=\'\' '
                     "and --config.pretrained_path=''.")
  config_lib.check_choice('mpp.target', config.mpp.target)
  patch = config.model.patches.size[0]
  if name == 'mpp' and config.mpp.target == 'color_4x4' and patch % mpp.DOWNSIZED_CELLS:
    raise ValueError(f'mpp.target=color_4x4 needs a patch size divisible by 4 (it is {patch}); '
                     'use --config.mpp.target=mean_color.')
  if name == 'mae' and not 0. < config.mae.mask_ratio < 1.:
    raise ValueError(f'mae.mask_ratio={config.mae.mask_ratio} must be in (0, 1) (MAE: 0.75).')
  gh, gw = models.token_grid(config.model, (config.pp.crop, config.pp.crop))
  where = f' ({gh}x{gw} at pp.crop={config.pp.crop}, patch {patch})'
  if name == 'mae':
    problem = mae.mask_problem(gh * gw, config.mae.mask_ratio, where)
  else:
    problem = mpp.corruption_problem(gh * gw, corrupt=config.mpp.corrupt, mask=config.mpp.mask,
                                     random=config.mpp.random, where=where)
  if problem:
    raise ValueError(problem)


def get_model(config: Any) -> Any:
  """The pretraining model of `config.trainer` around the headless, unpooled ViT `encoder`."""
  classifier = models_masked.UNPOOLED[config.model.get('classifier', 'token')]
  encoder = models.get_model(config.model, num_classes=0, classifier=classifier)
  if config.trainer == 'mpp':
    return models_masked.MaskedPatchPredictor(encoder=encoder, num_outputs=mpp.num_outputs(
        config.mpp.target, config.mpp.color_bits, config.model.patches.size[0]))
  return models_masked.MaskedAutoencoder(
      encoder=encoder, decoder_width=config.mae.decoder_width,
      decoder_depth=config.mae.decoder_depth, decoder_heads=config.mae.decoder_heads)


@dataclasses.dataclass(frozen=True)
class Objective:
  """A masked trainer's loss and eval, as the train and eval steps call them.

  Attributes:
    losses: (params, images, rng, train) → (per-image loss, per-image accuracy or None).
    seed: `config.seed`, from which the eval masks derive.
  """
  losses: Callable[..., Any]
  seed: int

  def loss(self, params: Any, images: jax.Array, rng: jax.Array) -> jax.Array:
    """The mean training loss of a batch (masks from `rng`)."""
    return self.losses(params, images, rng, True)[0].mean()

  def eval_sums(self, params: Any, batch: Dict[str, jax.Array]) -> Dict[str, jax.Array]:
    """Masked sums as `train.make_eval_step` returns them: 'correct' sums the per-image
    accuracy of MPP's colour targets (NaN where the target is no class: MAE, MPP 'pixels')."""
    rng = jax.random.fold_in(jax.random.key(self.seed), EVAL_STREAM)
    loss, accuracy = self.losses(params, batch['image'], rng, False)
    mask = batch['mask']
    correct = jnp.nan if accuracy is None else jnp.sum(accuracy * mask)
    return {'correct': jnp.asarray(correct, jnp.float32), 'loss': jnp.sum(loss * mask),
            'count': jnp.sum(mask)}


def objective(config: Any, model: Any) -> Optional[Objective]:
  """The `Objective` of `config.trainer`, or None for the supervised trainers."""
  if not is_self_supervised(config):
    return None
  patch = config.model.patches.size[0]
  mean, std = jnp.asarray(config.pp.mean), jnp.asarray(config.pp.std)

  def mpp_losses(params, images, rng, train):
    n, h, w, _ = images.shape
    kind, source = mpp.corruption_plan(
        jax.random.fold_in(rng, MASK_STREAM), n, (h // patch) * (w // patch),
        corrupt=config.mpp.corrupt, mask=config.mpp.mask, random=config.mpp.random)
    outputs = model.apply({'params': params}, images, train=train, kind=kind, source=source,
                          rngs={'dropout': rng})
    loss, correct = mpp.patch_losses(outputs, images, images * std + mean, patch=patch,
                                     target=config.mpp.target, bits=config.mpp.color_bits)
    chosen = (kind != models_masked.UNTOUCHED).astype(jnp.float32)
    count = jnp.maximum(chosen.sum(axis=1), 1.)
    return ((loss * chosen).sum(axis=1) / count,
            None if correct is None else (correct * chosen).sum(axis=1) / count)

  def mae_losses(params, images, rng, train):
    n, h, w, _ = images.shape
    keep = mae.visible_patches(jax.random.fold_in(rng, MASK_STREAM), n,
                               (h // patch) * (w // patch), config.mae.mask_ratio)
    predictions = model.apply({'params': params}, images, train=train, keep=keep,
                              rngs={'dropout': rng})
    return mae.reconstruction_loss(predictions, images, keep, patch=patch,
                                   norm_pix_loss=config.mae.norm_pix_loss), None

  return Objective(mpp_losses if config.trainer == 'mpp' else mae_losses, config.seed)


def encoder_params(config: Any, params: Any) -> Any:
  """What a run exports: the encoder's tree for the masked trainers, else `params`."""
  return params['encoder'] if is_self_supervised(config) else params


def description(config: Any, steps: int, result: Dict[str, Any]) -> Dict[str, Any]:
  """metadata.json's `self_supervised` entry: how the encoder was pretrained, on what."""
  method = config.trainer
  settings = dict(config[method].to_dict())
  return dict(method=method, name=METHODS[method], steps=steps, batch=config.batch,
              dataset=config.dataset, split=config.pp.train, labels_used=False,
              settings=settings, loss_test=result.get('loss'))
