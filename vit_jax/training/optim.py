"""Learning-rate schedules and optimizers for fine-tuning (official) and pretraining (paper)."""

import dataclasses
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import optax

from vit_jax import config_lib


@dataclasses.dataclass(frozen=True)
class Optimizer:
  """What `make_optimizer` builds (the config's optimizer fields; defaults in `config_lib`).

  Attributes:
    name: 'sgd' (momentum 0.9, fine-tuning) or 'adamw' (pretraining) (`config.optim`).
    grad_norm_clip: the global-norm clip, 0 = off.
    dtype: the SGD momentum dtype, 'bfloat16' as officially (`config.optim_dtype`).
    b1: Adam's beta1.
    b2: Adam's beta2.
    weight_decay: decoupled weight decay (AdamW only).
    weight_decay_on: which params it decays ('kernels' or 'all').
  """
  name: str
  grad_norm_clip: float
  dtype: str
  b1: float
  b2: float
  weight_decay: float
  weight_decay_on: str


def learning_rate_schedule(*, total_steps: int, base_lr: float, decay_type: str,
                           warmup_steps: int, linear_end: float = 1e-5) -> optax.Schedule:
  """Linear warmup from 0 to `base_lr`, then cosine to 0 or linear to `linear_end`.

  Same values as the official `create_learning_rate_schedule` (step 0 has lr 0).
  """
  config_lib.check_choice('decay_type', decay_type)
  if not 0 <= warmup_steps < total_steps:
    raise ValueError(f'warmup_steps={warmup_steps} must be in [0, total_steps={total_steps}).')
  decay_steps = total_steps - warmup_steps
  if decay_type == 'cosine':
    decay = optax.cosine_decay_schedule(base_lr, decay_steps)
  else:
    decay = optax.linear_schedule(base_lr, linear_end, decay_steps)
  if not warmup_steps:
    return decay
  warmup = optax.linear_schedule(0., base_lr, warmup_steps)
  return optax.join_schedules([warmup, decay], [warmup_steps])


def make_optimizer(settings: Optimizer, schedule: optax.Schedule
                   ) -> optax.GradientTransformation:
  """Global-norm clip, then SGD momentum 0.9 (fine-tuning) or AdamW (pretraining).

  The SGD momentum in `settings.dtype` ('bfloat16' as in the official code) saves memory;
  AdamW's weight decay is decoupled and applies to `settings.weight_decay_on`.
  """
  name = config_lib.check_choice('optim', settings.name)
  clip = settings.grad_norm_clip
  chain = [optax.clip_by_global_norm(clip)] if clip else []
  if name == 'sgd':
    if settings.weight_decay:
      raise ValueError('weight_decay is only used with optim="adamw"; official fine-tuning uses '
                       'none. Set --config.weight_decay=0 or --config.optim=adamw.')
    chain.append(optax.sgd(schedule, momentum=0.9,
                           accumulator_dtype=jnp.dtype(settings.dtype)))
  else:
    chain.append(optax.adamw(schedule, b1=settings.b1, b2=settings.b2,
                             weight_decay=settings.weight_decay,
                             mask=weight_decay_mask(settings.weight_decay_on)))
  return optax.chain(*chain)


def weight_decay_mask(on: str) -> Optional[Callable[[Any], Any]]:
  """Which params AdamW decays: 'kernels' (big_vision's default `.*/kernel$`) or 'all'.

  'kernels' leaves biases, norm scales, position embeddings and the class token undecayed:
  decaying them pulls the norms' scales and the embeddings towards 0 for no regularisation gain.
  """
  if config_lib.check_choice('weight_decay_on', on) == 'all':
    return None
  return lambda params: jax.tree_util.tree_map_with_path(
      lambda path, _: getattr(path[-1], 'key', None) == 'kernel', params)
