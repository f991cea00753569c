"""Training and evaluation: `train_and_evaluate(config, workdir)`, its steps and its loop.

Flow: the config read once (`training.settings.read`) → dataset info → model → initial state
(workdir checkpoint > pretrained npz > scratch) → jit-compiled data-parallel `train_step` over a
1-D mesh → periodic progress, eval and orbax checkpoints → `workdir/params.npz` in the
published format. What the loop is built from lives in `vit_jax.training` (settings, state,
losses, evaluation, progress, stop, export, stages) and the resumable checkpoints in
`vit_jax.weights.resume`; none of it reads the config but `settings` and the run record.
"""

import functools
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import jax
import jax.numpy as jnp
import ml_collections
import optax
import orbax.checkpoint as ocp
from absl import logging
from clu import metric_writers
from jax.sharding import Mesh

from vit_jax import input_pipeline
from vit_jax.weights import resume
from vit_jax.training import distill
from vit_jax.training import evaluation
from vit_jax.training import export
from vit_jax.training import fewshot
from vit_jax.training import from_checkpoint
from vit_jax.training import losses
from vit_jax.training import masked
from vit_jax.training import parallel
from vit_jax.training import plotting
from vit_jax.training import progress as progress_lib
from vit_jax.training import run_record
from vit_jax.training import settings
from vit_jax.training import stages
from vit_jax.training import state as state_lib
from vit_jax.training import stop as stop_lib

State = state_lib.State
# The eval step and exact evaluation, as the official train module offers them.
make_eval_step, evaluate = evaluation.make_eval_step, evaluation.evaluate


class NonFiniteLossError(ValueError):
  """A step's loss, gradient or new weights became NaN or infinite (the step was not applied)."""


def _all_finite(tree: Any) -> jax.Array:
  return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


def split_microbatches(x: jax.Array, accum_steps: int) -> jax.Array:
  """[B, ...] → [accum_steps, B / accum_steps, ...], taking every accum_steps-th example.

  Strided, not contiguous: each device's contiguous shard holds a slice of every microbatch,
  so the split needs no communication.
  """
  x = x.reshape(x.shape[0] // accum_steps, accum_steps, *x.shape[1:])
  return jnp.swapaxes(x, 0, 1)


def accumulate_gradient(loss_fn: Callable, params: Any, images: jax.Array, labels: jax.Array,
                        rng: jax.Array, accum_steps: int) -> Tuple[jax.Array, Any]:
  """Mean loss and gradient over the batch, computed in `accum_steps` sequential microbatches."""
  grad_fn = jax.value_and_grad(loss_fn)
  if accum_steps <= 1:
    return grad_fn(params, images, labels, rng)

  def body(carry, micro):
    index, micro_images, micro_labels = micro
    loss, grads = grad_fn(params, micro_images, micro_labels, jax.random.fold_in(rng, index))
    return jax.tree.map(jnp.add, carry, (loss, grads)), None

  zeros = (jnp.zeros((), jnp.float32), jax.tree.map(jnp.zeros_like, params))
  micro = (jnp.arange(accum_steps), split_microbatches(images, accum_steps),
           split_microbatches(labels, accum_steps))
  (loss, grads), _ = jax.lax.scan(body, zeros, micro)
  return jax.tree.map(lambda x: x / accum_steps, (loss, grads))


def make_train_step(model: Any, tx: optax.GradientTransformation, run: settings.Run, mesh: Mesh,
                    shardings: Any = None, teacher: Optional[distill.Teacher] = None,
                    ) -> Callable[[State, Mapping[str, jax.Array]], Tuple[State, Dict]]:
  """Returns the jitted `train_step(state, batch) -> (state, metrics)` (state donated).

  `run` gives the loss, label smoothing, Mixup, weight average, accumulation, the masked
  trainers' objective and the uint8 batches' normalisation. `shardings` (a tree like the
  state; default all replicated) is both the input and the output sharding of the state: with
  sharded params XLA inserts the all-gathers before use and reduce-scatters the gradients, in
  this same function. With a `teacher`, its params are a (replicated) argument of the compiled
  step and its forward pass runs per microbatch on the same images (`distill`). With
  `run.mixup` the global batch is mixed first (`mixup`). A step whose loss, gradient norm or
  new weights are not finite returns the state unchanged, with `metrics['nonfinite']` set for
  the loop to stop on.
  """
  loss_kind = run.loss
  smoothing = run.label_smoothing
  ema_decay = run.ema_decay
  mixup_alpha = float(run.mixup)
  accum_steps = run.accum_steps or 1
  distilling = run.distill
  objective = _objective(run, model)  # Self-supervised: the images are the targets.
  normalize = input_pipeline.device_normalize(run.data)  # uint8 batches: normalised here.

  def loss_fn(params, images, labels, rng, teacher_params):
    if objective is not None:
      return objective.loss(params, images, rng)
    if teacher is not None and distill.uses_token(model):  # DeiT: a head per target.
      logits, dist_logits = distill.head_logits(model, params, images, rng)
    else:
      logits = dist_logits = model.apply({'params': params}, images, train=True,
                                         rngs={'dropout': rng})
    loss = losses.compute_loss(logits, labels, loss_kind, smoothing)
    if teacher is not None:
      loss = distill.distill_loss(distilling, dist_logits,
                                  distill.teacher_logits(teacher, teacher_params, images), loss)
    return loss.mean()

  def train_step(state, batch, teacher_params):
    # Dropout rng derived from the step: no rng state to carry, identical on every process.
    seed = jax.random.wrap_key_data(state['rng'])
    rng = jax.random.fold_in(seed, state['step'])
    images, labels = batch['image'], batch['label']
    if normalize is not None:
      images = normalize(images)
    if mixup_alpha:
      images, labels = losses.mixup(images, labels, mixup_alpha, jax.random.fold_in(
          jax.random.fold_in(seed, losses.MIXUP_STREAM), state['step']))
    loss, grads = accumulate_gradient(
        functools.partial(loss_fn, teacher_params=teacher_params), state['params'],
        images, labels, rng, accum_steps)
    updates, opt_state = tx.update(grads, state['opt_state'], state['params'])
    params = optax.apply_updates(state['params'], updates)
    new_state = dict(state, params=params, opt_state=opt_state, step=state['step'] + 1)
    if ema_decay:  # Polyak average of the weights: new = d * old + (1 - d) * params, d warmed up.
      new_state['ema_params'] = optax.incremental_update(
          params, state['ema_params'], 1. - losses.ema_decay_at(ema_decay, state['step']))
    grad_norm = optax.tree.norm(grads)
    # An inf gradient can come with a finite loss (clipping then turns its norm into NaN
    # weights): such a step is not applied at all, and the loop stops before saving anything.
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm) & _all_finite(params)
    new_state = jax.tree.map(lambda new, old: jnp.where(finite, new, old), new_state, state)
    return new_state, {'loss': loss, 'grad_norm': grad_norm, 'nonfinite': ~finite}

  replicated = parallel.replicated(mesh)
  shardings = replicated if shardings is None else shardings
  step = jax.jit(train_step, donate_argnums=(0,),
                 in_shardings=(shardings, parallel.data_sharded(mesh), replicated),
                 out_shardings=(shardings, replicated))
  teacher_params = None if teacher is None else teacher.params
  return lambda state, batch: step(state, batch, teacher_params)


def _objective(run: settings.Run, model: Any) -> Optional[masked.Objective]:
  """The masked trainers' `Objective` for `model`, or None (supervised)."""
  return masked.objective(run.masked, model, run.model_config, run.data.mean, run.data.std)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> Dict[str, Any]:
  """Trains (or continues training) per `config` in `workdir`; returns final eval metrics.

  Writes TensorBoard events, `metrics.jsonl` + `curves.png`, orbax checkpoints under
  `workdir/train_state` and the final `workdir/params.npz`. Returns `{'step': total, ...}` when
  finished, or `{'stopped_at': step, ...}` when SIGTERM stopped it with steps left (a checkpoint
  saved, no params.npz; `python -m vit_jax.main` exits 143 then). Without `config.model` the
  model is the one `config.pretrained_path` holds (`from_checkpoint.with_checkpoint_model`).
  A rerun is first compared with the run directory's record (`run_record.check`: other data or
  config stop it before anything is written); resuming takes what the pretrained weights
  contributed from the record, without opening them. The config is read once, here
  (`settings.read`); what follows takes the settings.
  """
  checked = run_record.check(config, workdir)
  user = settings.read(config)
  pretrained = from_checkpoint.PretrainedSource()  # Read at most once, by whoever needs it first.
  if checked.record is not None:  # A rerun: what the weights contributed is in the record.
    run = run_record.with_recorded_contributions(user, checked.record)
  else:
    run = from_checkpoint.with_checkpoint_normalization(
        from_checkpoint.with_checkpoint_model(user, pretrained), pretrained)
  with resume.unmade_if_refused(workdir):
    manager = resume.make_checkpoint_manager(workdir, run.keep_checkpoints)
    trainer = state_lib.build_trainer(run, needs_pretrained=manager.latest_step() is None)
    eval_data = evaluation.get_eval_splits(run.data)  # Splits checked before writing.
  state, damaged = resume.restore_or_init(manager, lambda: state_lib.abstract_state(trainer),
                                          lambda: state_lib.init_state(trainer,
                                                                       pretrained=pretrained))
  pretrained = None  # Its host copy of the pretrained arrays is not needed any more.
  if damaged:  # Reopened without them, so orbax neither resumes from nor deletes them.
    manager.close()
    manager = resume.make_checkpoint_manager(workdir, run.keep_checkpoints, damaged)
  start = int(parallel.to_host(state['step']))
  run_record.write(workdir, checked, user, run, trainer.info.class_names, start,
                   trainer.total_steps)
  logging.info('Model %s, %d classes, %d steps of batch %d; starting at step %d.',
               run.model_config.get('model_name'), trainer.info.num_classes, trainer.total_steps,
               run.data.batch, start)
  if start >= trainer.total_steps:  # A rerun of a finished run (the same command, same workdir).
    logging.warning('%s already trained all %d steps: evaluating and exporting it again, nothing '
                    'to train (raise total_steps or num_epochs to continue it).', workdir, start)
  export.log_weight_average(run.ema_decay, trainer.total_steps)
  writer = metric_writers.create_default_writer(workdir, just_logging=jax.process_index() > 0)
  progress = progress_lib.ProgressLog(writer, trainer.total_steps, start, run.data.batch,
                                      os.path.join(workdir, 'metrics.jsonl'))
  eval_step = make_eval_step(trainer.model, trainer.mesh,
                             state_lib.state_shardings(trainer)['params'], run.loss,
                             _objective(run, trainer.model))
  try:
    return _train_loop(trainer, state, start, manager, progress, eval_step, eval_data, workdir)
  finally:
    writer.flush()
    manager.wait_until_finished()  # Never leave a half-written checkpoint behind.
    manager.close()


def _train_loop(trainer: state_lib.Trainer, state: State, start: int,
                manager: ocp.CheckpointManager, progress: progress_lib.ProgressLog,
                eval_step: Callable, eval_data: Any, workdir: str) -> Dict[str, Any]:
  run, total = trainer.run, trainer.total_steps
  teacher = distill.load_teacher(run.distill, trainer.info.num_classes, run.data.crop,
                                 trainer.mesh)
  train_step = make_train_step(trainer.model, trainer.tx, run, trainer.mesh,
                               state_lib.state_shardings(trainer), teacher)
  fewshot_eval = fewshot.make_hook(run.fewshot, run.data, trainer.model, trainer.mesh,
                                   state_lib.state_shardings(trainer)['params'])
  batches = parallel.device_prefetch(input_pipeline.get_train_data(run.data, start_batch=start),
                                     trainer.mesh, run.data.prefetch)
  stop = stop_lib.StopSignal()
  nonfinite, checked_step, result = jnp.zeros((), bool), start, {}
  try:
    for step in range(start + 1, total + 1):
      batch, waited = next(batches)
      progress.data_wait += waited
      state, metrics = train_step(state, batch)
      nonfinite = nonfinite | metrics['nonfinite']
      progress.add_loss(metrics['loss'])
      if step == start + 1:
        logging.info('First step done (includes compilation).')
      stopping = stop.check(step, run.progress_every)
      save_due = _is_due(step, run.checkpoint_every, total) or stopping
      if _is_due(step, run.progress_every, total) or save_due:
        _check_finite(nonfinite, checked_step, step, manager)
        checked_step = step
      if _is_due(step, run.progress_every, total):
        # Step `step` (1-based) was the optimizer's update number step - 1: that is its lr.
        progress.train(step, float(trainer.schedule(step - 1)))
      if save_due:  # Before the evaluations: one that fails never costs this step's checkpoint.
        resume.save_checkpoint(manager, step, state)
      # After SIGTERM the grace period goes to the checkpoint, not to an eval due at this step.
      if _is_due(step, run.eval_every, total) and not stopping:
        result = evaluation.run_eval(trainer, eval_step, state, eval_data, progress, step)
      if (fewshot_eval and fewshot.is_due(step, run.fewshot, run.eval_every, total)
          and not stopping):
        progress.write(step, fewshot_eval(export.final_params(state), step))
      if stopping:
        manager.wait_until_finished()
        logging.warning('Stopped at step %d after SIGTERM; rerun the same command to resume.',
                        step)
        return {'stopped_at': step, **result}
    manager.wait_until_finished()
  finally:
    stop.close(batches)  # Now, or after SIGTERM without waiting for tf.data (`StopSignal.close`).
  if not result:  # Nothing left to train (a finished run rerun) or no eval was due: report one.
    result = evaluation.run_eval(trainer, eval_step, state, eval_data, progress, total)
  if jax.process_index() == 0:
    plotting.plot_curves(progress.history_path, os.path.join(workdir, 'curves.png'))
  export.export_params(trainer, export.final_params(state), workdir, result)
  return {'step': total, **result}


def _check_finite(nonfinite: jax.Array, last_good: int, step: int,
                  manager: ocp.CheckpointManager) -> None:
  """Stops the run when a step since `last_good` was not finite, before anything is saved.

  Such a step was not applied (`make_train_step`), and every checkpoint was saved after a
  check like this one, so the checkpoints on disk all hold finite weights.
  """
  if bool(parallel.to_host(nonfinite)):
    manager.wait_until_finished()
    kept = manager.latest_step()
    where = (f'the last good checkpoint (step {kept}) is kept in {manager.directory}; rerun to '
             'resume from it' if kept is not None else
             'no checkpoint was saved before it, so a rerun starts from the beginning')
    raise NonFiniteLossError(
        f'The loss, gradient or updated weights became NaN/inf between steps {last_good + 1} '
        f'and {step} (that step was not applied; nothing after step {last_good} is saved or '
        f'exported); {where}. Lower --config.base_lr, raise --config.warmup_steps, keep '
        '--config.grad_norm_clip on or check the input data.')


def _is_due(step: int, every: Optional[int], total: int) -> bool:
  return step == total or bool(every and step % every == 0)


def pretrain_then_finetune(config: ml_collections.ConfigDict, workdir: str) -> Dict[str, Any]:
  """Runs `config.pretrain`, exports its npz, then fine-tunes `config.finetune` from that npz.

  Each stage has its own sub-workdir (so each resumes on its own); the fine-tuning stage may use
  a higher `pp.crop`, in which case the position embeddings are resized on load. Stage 2 is tied
  to the stage-1 export it started from (`stages.tie_to_stage1`): extending stage 1 restarts
  stage 2.
  """
  (_, pre_dir), (finetune, fine_dir) = stage_runs(config, workdir)
  logging.info('Stage 1/2: pretraining in %s', pre_dir)
  pre = train_and_evaluate(config.pretrain, pre_dir)
  if 'stopped_at' in pre:  # SIGTERM during stage 1: rerunning the command continues it.
    return {'pretrain': pre}
  stages.tie_to_stage1(fine_dir, stages.stage1_source(finetune.pretrained_path, pre['step']))
  logging.info('Stage 2/2: fine-tuning from %s at %dpx in %s', finetune.pretrained_path,
               finetune.pp.crop, fine_dir)
  fine = train_and_evaluate(finetune, fine_dir)
  if jax.process_index() == 0:
    plotting.plot_stages({'pretrain': os.path.join(pre_dir, 'metrics.jsonl'),
                          'finetune': os.path.join(fine_dir, 'metrics.jsonl')},
                         os.path.join(workdir, 'curves.png'))
  return {'pretrain': pre, 'finetune': fine}


def stage_runs(config: ml_collections.ConfigDict, workdir: str
               ) -> List[Tuple[ml_collections.ConfigDict, str]]:
  """(config, run directory) of each `train_and_evaluate` call `config.trainer` makes: the
  run itself, or `pretrain_then_finetune`'s two stages (stage 2 fine-tunes stage 1's export)."""
  if config.trainer != 'pretrain_then_finetune':
    return [(config, workdir)]
  finetune = ml_collections.ConfigDict(config.finetune.to_dict())
  finetune.pretrained_path = os.path.join(workdir, 'pretrain', 'params.npz')
  return [(config.pretrain, os.path.join(workdir, 'pretrain')),
          (finetune.lock(), os.path.join(workdir, 'finetune'))]


def check_inputs(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Compares each run directory's record with this command's inputs before anything (a log
  line included) is written; raises `run_record.ChangedInputsError` as the run itself would.
  Stage 2's few-shot evaluation is checked too: its refusal must not wait for stage 1 to train."""
  runs = stage_runs(config, workdir)
  for stage_config, stage_dir in runs:
    run_record.check(stage_config, stage_dir)
  for stage_config, _ in runs[1:]:  # pretrain_then_finetune's stage 2.
    fewshot.check_datasets(settings.fewshot(stage_config), settings.data(stage_config),
                           fewshot.config_flags('--config.finetune.'))


__all__ = ['train_and_evaluate', 'pretrain_then_finetune', 'make_train_step', 'make_eval_step',
           'accumulate_gradient', 'evaluate']
