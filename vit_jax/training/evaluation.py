"""Evaluation during training: the jitted eval step, exact evaluation of a whole split (padded,
masked, summed over processes), the splits a run evaluates, and the logged eval of a step."""

import time
from typing import Any, Callable, Dict, Mapping, Optional

import jax
import jax.numpy as jnp
from absl import logging
from jax.sharding import Mesh

from vit_jax import input_pipeline
from vit_jax.training import export
from vit_jax.training import losses
from vit_jax.training import masked
from vit_jax.training import parallel
from vit_jax.training import progress as progress_lib
from vit_jax.training import state as state_lib

State = state_lib.State


def make_eval_step(model: Any, mesh: Mesh, params_sharding: Any = None,
                   loss_kind: str = 'softmax_xent',
                   objective: Optional[masked.Objective] = None) -> Callable:
  """Returns jitted `eval_step(params, batch) -> {correct, loss, count}` as masked sums.

  `params_sharding` is the train state's (default replicated): eval reads the params in place.
  `loss_kind` is the training loss's (`run.loss`, without label smoothing), so the eval loss
  of a sigmoid run is the sigmoid loss it optimises. A self-supervised `objective` computes
  its own sums (its loss on fixed masks).
  """

  def eval_step(params, batch):
    if objective is not None:
      return objective.eval_sums(params, batch)
    logits = model.apply({'params': params}, batch['image'], train=False)
    mask = batch['mask']
    correct = jnp.argmax(logits, -1) == jnp.argmax(batch['label'], -1)
    loss = losses.compute_loss(logits, batch['label'], loss_kind)
    return {'correct': jnp.sum(correct * mask), 'loss': jnp.sum(loss * mask),
            'count': jnp.sum(mask)}

  replicated = parallel.replicated(mesh)
  params_sharding = replicated if params_sharding is None else params_sharding
  return jax.jit(eval_step, in_shardings=(params_sharding, parallel.data_sharded(mesh)),
                 out_shardings=replicated)


def evaluate(eval_step: Callable, params: Any, eval_data: Any, mesh: Mesh) -> Dict[str, float]:
  """Exact evaluation over the whole split (padded last batch, masked), summed over processes."""
  totals = {'correct': 0., 'loss': 0., 'count': 0.}
  for batch in eval_data.batches():
    sums = eval_step(params, parallel.put_batch(batch, mesh))
    totals = {k: totals[k] + v for k, v in sums.items()}
  totals = {k: float(v) for k, v in parallel.to_host(totals).items()}
  count = max(totals['count'], 1.)
  return {'accuracy': totals['correct'] / count, 'loss': totals['loss'] / count,
          'num_examples': int(totals['count'])}


def get_eval_splits(data: input_pipeline.Data) -> Dict[str, Any]:
  """{'test': pp.test} plus 'val' (pp.val) and 'train' (pp.train_eval) when set, as EvalData."""
  specs = dict(test=data.test, val=data.val, train=data.train_eval)
  return {name: input_pipeline.get_eval_data(data, spec) for name, spec in specs.items() if spec}


def run_eval(trainer: state_lib.Trainer, eval_step: Callable, state: State,
             eval_data: Mapping[str, Any], progress: progress_lib.ProgressLog,
             step: int) -> Dict[str, float]:
  """Evaluates `export.final_params(state)` on every split of `eval_data` ('test' first; the
  others' metrics get the split's suffix: accuracy_val, accuracy_train); with a weight average,
  the raw weights on test too (`_raw`)."""
  start = time.time()
  result = evaluate(eval_step, export.final_params(state), eval_data['test'], trainer.mesh)
  seconds = time.time() - start
  logging.info('Step %d: test accuracy=%.4f loss=%.4f on %d examples (%.1fs)', step,
               result['accuracy'], result['loss'], result['num_examples'], seconds)
  scalars = {'accuracy_test': result['accuracy'], 'loss_test': result['loss'],
             'img_sec_core_test': result['num_examples'] / max(seconds, 1e-9)
             / jax.device_count()}
  for name, data in eval_data.items():
    if name == 'test':
      continue
    other = evaluate(eval_step, export.final_params(state), data, trainer.mesh)
    logging.info('Step %d: %s accuracy=%.4f loss=%.4f on %d examples', step, name,
                 other['accuracy'], other['loss'], other['num_examples'])
    scalars.update({f'accuracy_{name}': other['accuracy'], f'loss_{name}': other['loss']})
    result = dict(result, **{f'accuracy_{name}': other['accuracy'],
                             f'num_examples_{name}': other['num_examples']})
  if 'ema_params' in state:
    raw = evaluate(eval_step, state['params'], eval_data['test'], trainer.mesh)
    logging.info('Step %d: test accuracy of the raw (not averaged) weights=%.4f', step,
                 raw['accuracy'])
    scalars.update(accuracy_test_raw=raw['accuracy'], loss_test_raw=raw['loss'])
    result = dict(result, accuracy_raw=raw['accuracy'])
  progress.write(step, scalars)
  return result
