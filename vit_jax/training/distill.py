"""Knowledge distillation from a fixed teacher checkpoint (DeiT, Touvron et al. 2021).

A student with a distillation token (`distilled=True`: a `dist` token and its own `head_dist`)
is trained as DeiT is: the class head on the true labels, the distillation head on the teacher's
targets (`head_logits`); its output at evaluation is the mean of both heads. Any other student
keeps its single head, and both losses are averaged on it. The teacher is loaded once from an npz,
replicated on the mesh and passed into the jitted train step, where it runs with `train=False`
on the same sharded batch under `stop_gradient`. Nothing is added to the train state, so a
resumed run recomputes the same teacher outputs and stays exact.
"""

import dataclasses
from typing import Any, Optional, Tuple

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

from vit_jax import config_lib
from vit_jax.training import parallel
from vit_jax.weights import loading


@dataclasses.dataclass(frozen=True)
class Distill:
  """Distillation's teacher and loss (`config.distill`; defaults in `config_lib`).

  Attributes:
    teacher_path: the teacher checkpoint; '' = no distillation.
    teacher_model: the teacher's preset name or model .py file; '' = what its run's export says.
    kind: 'hard' (DeiT: the teacher's argmax as a second target) or 'soft' (KL at temperature).
    alpha: the weight of the teacher's term (1 - alpha: the true labels').
    temperature: soft distillation's tau.
  """
  teacher_path: str
  teacher_model: str
  kind: str
  alpha: float
  temperature: float


@dataclasses.dataclass(frozen=True)
class Teacher:
  """A teacher Flax module and its params (replicated on the mesh)."""
  model: Any
  params: Any


def hard_loss(logits: jax.Array, teacher_logits: jax.Array, alpha: float,
              true_loss: jax.Array) -> jax.Array:
  """DeiT hard distillation: (1 - alpha) · true-label loss + alpha · CE(student, teacher argmax).

  Args:
    logits: student logits [B, C].
    teacher_logits: [B, C]; their argmax is the second target.
    alpha: weight of the teacher's target (DeiT: 0.5, the plain average).
    true_loss: the per-example loss on the true labels (the run's own loss, smoothing included).

  Returns:
    Per-example loss [B].
  """
  teacher_labels = jax.nn.one_hot(jnp.argmax(teacher_logits, -1), logits.shape[-1])
  return (1. - alpha) * true_loss + alpha * optax.softmax_cross_entropy(logits, teacher_labels)


def soft_loss(logits: jax.Array, teacher_logits: jax.Array, alpha: float, temperature: float,
              true_loss: jax.Array) -> jax.Array:
  """Hinton/DeiT soft distillation: (1 - alpha) · true loss + alpha · tau² · KL(teacher ‖ student).

  Both distributions are softmaxes at temperature tau; tau² keeps the gradient scale of the KL
  term independent of tau (Hinton et al. 2015).
  """
  log_student = jax.nn.log_softmax(logits / temperature, axis=-1)
  log_teacher = jax.nn.log_softmax(teacher_logits / temperature, axis=-1)
  kl = optax.losses.kl_divergence_with_log_targets(log_student, log_teacher)
  return (1. - alpha) * true_loss + alpha * temperature**2 * kl


def distill_loss(settings: Distill, logits: jax.Array, teacher_logits: jax.Array,
                 true_loss: jax.Array) -> jax.Array:
  """Per-example loss of `settings.kind` mixing `true_loss` with the teacher's targets."""
  if settings.kind == 'hard':
    return hard_loss(logits, teacher_logits, settings.alpha, true_loss)
  return soft_loss(logits, teacher_logits, settings.alpha, settings.temperature, true_loss)


def uses_token(model: Any) -> bool:
  """Whether `model` has a distillation token and head (a ViT built with distilled=True)."""
  return bool(getattr(model, 'distilled', False))


def head_logits(model: Any, params: Any, images: jax.Array,
                rng: jax.Array) -> Tuple[jax.Array, jax.Array]:
  """A distilled ViT's training-mode (class head, distillation head) logits, each [B, C]."""
  _, state = model.apply({'params': params}, images, train=True, rngs={'dropout': rng},
                         mutable=['intermediates'])
  inter = state['intermediates']
  return inter['head_logits'][0], inter['head_dist_logits'][0]


def teacher_logits(teacher: Teacher, teacher_params: Any, images: jax.Array) -> jax.Array:
  """The fixed teacher's logits (inference mode, no gradient into anything)."""
  logits = teacher.model.apply({'params': teacher_params}, images, train=False)
  return jax.lax.stop_gradient(logits.astype(jnp.float32))


def validate(settings: Distill) -> None:
  """One-line errors for distillation settings (called with the rest of `state.validate_run`)."""
  if not settings.teacher_path:
    return
  config_lib.check_choice('distill.kind', settings.kind)
  if not 0. <= settings.alpha <= 1.:
    raise ValueError(f'distill.alpha={settings.alpha} must be in [0, 1] (the weight of '
                     'the teacher term; 0.5 averages it with the true-label loss as in DeiT).')
  if settings.temperature <= 0.:
    raise ValueError(f'distill.temperature={settings.temperature} must be positive.')


def load_teacher(settings: Distill, num_classes: int, crop: int,
                 mesh: Mesh) -> Optional[Teacher]:
  """The teacher of `settings` fitted to `crop` inputs, or None when not distilling."""
  if not settings.teacher_path:
    return None
  loaded = loading.load_model(settings.teacher_path, settings.teacher_model or None, crop)
  if not settings.teacher_model and loaded.assumed:  # Declared by its run, or by the config.
    raise ValueError(f'distill.teacher_model is empty and {settings.teacher_path} does not say '
                     f'{"; ".join(loaded.assumed)}; set distill.teacher_model to the teacher\'s '
                     'preset name (e.g. ResNet-11_28px) or model .py file.')
  if loaded.num_classes != num_classes:
    raise ValueError(f'The teacher {settings.teacher_path} has {loaded.num_classes} '
                     f'classes and the dataset {num_classes}; distil from a teacher trained on '
                     'the same labels.')
  return Teacher(loaded.model, parallel.put_replicated(loaded.params, mesh))
