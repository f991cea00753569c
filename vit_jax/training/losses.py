"""The loss a training step minimises, and the math of the weights it averages.

Pure functions of arrays, used inside the jitted step (`vit_jax.train.make_train_step`):
cross-entropy (softmax or sigmoid, with label smoothing), mixup of the global batch, and the
warmed-up decay of the exponential moving average of the weights.
"""

from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from vit_jax import config_lib


# Mixup's rng stream: fold_in(rng, MIXUP_STREAM) then the step; no step (int32) reaches it, so it
# never meets dropout's fold_in(rng, step).
MIXUP_STREAM = 2**31 - 1


def compute_loss(logits: jax.Array, labels: jax.Array, kind: str = 'softmax_xent',
                 label_smoothing: float = 0.) -> jax.Array:
  """Per-example loss for one-hot (or mixed-up) `labels`."""
  config_lib.check_choice('loss', kind)
  if label_smoothing:
    labels = labels * (1. - label_smoothing) + label_smoothing / labels.shape[-1]
  if kind == 'sigmoid_xent':
    # Summed over classes, as big_vision's i21k pretraining does.
    return optax.sigmoid_binary_cross_entropy(logits, labels).sum(axis=-1)
  return optax.softmax_cross_entropy(logits, labels)


def mixup(images: jax.Array, labels: jax.Array, alpha: float,
          rng: jax.Array) -> Tuple[jax.Array, jax.Array]:
  """Mixes each example of the global batch with its neighbour (roll by one), one
  Beta(alpha, alpha) ratio per batch, as big_vision does.

  Called inside the jitted step on the global batch, so the pairs and the ratio are the same
  whatever the number of processes and devices that hold it, and (with `rng` from the step) the
  same after a resume; accumulation splits the mixed batch.
  """
  ratio = jax.random.beta(rng, alpha, alpha)

  def mix(x):
    return ratio * x + (1. - ratio) * jnp.roll(x, 1, axis=0)
  return mix(images), mix(labels)


def ema_decay_at(decay: float, updates: jax.Array) -> jax.Array:
  """The weight average's decay after `updates` steps: min(decay, (1 + n) / (10 + n)).

  The warm-up of TF's ExponentialMovingAverage(num_updates) (timm's ModelEma warm-up is alike):
  without it a fraction decay^T of the average is still the initial model after T steps
  (0.9995^500 = 0.78), and a short fine-tune exports mostly its zero head.
  """
  updates = jnp.asarray(updates, jnp.float32)
  return jnp.minimum(decay, (1. + updates) / (10. + updates))


def ema_initial_weight(decay: float, steps: int) -> float:
  """The initial weights' share of the average after `steps` updates (product of the decays)."""
  if steps <= 0:
    return 1.
  if not decay:
    return 0.
  updates = np.arange(steps, dtype=np.float64)
  return float(np.exp(np.sum(np.log(np.minimum(decay, (1. + updates) / (10. + updates))))))
