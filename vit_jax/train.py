"""Training and evaluation: `train_and_evaluate(config, workdir)` built from small parts.

Flow: dataset info → model → initial state (workdir checkpoint > pretrained npz > scratch) →
jit-compiled data-parallel `train_step` over a 1-D mesh → periodic progress, eval and orbax
checkpoints → `workdir/params.npz` in the published format.
"""

import dataclasses
import functools
import hashlib
import json
import os
import signal
import threading
import time
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
from absl import logging
from clu import metric_writers
from jax.sharding import Mesh

from vit_jax import checkpoint
from vit_jax.training import distill
from vit_jax import input_pipeline
from vit_jax.data import image_ops
from vit_jax import models
from vit_jax.training import optim
from vit_jax.training import parallel
from vit_jax.training import plotting
from vit_jax import presets
from vit_jax.checkpoints import timm_files
from vit_jax.checkpoints import store
from vit_jax.checkpoints import metadata as metadata_lib
from vit_jax.checkpoints import loading
from vit_jax.checkpoints import architecture

State = Dict[str, Any]
LOSSES = ('softmax_xent', 'sigmoid_xent')


class NonFiniteLossError(ValueError):
  """A step's loss, gradient or new weights became NaN or infinite (the step was not applied)."""


# Mixup's rng stream: fold_in(rng, MIXUP_STREAM) then the step; no step (int32) reaches it, so it
# never meets dropout's fold_in(rng, step).
MIXUP_STREAM = 2**31 - 1


def compute_loss(logits: jax.Array, labels: jax.Array, kind: str = 'softmax_xent',
                 label_smoothing: float = 0.) -> jax.Array:
  """Per-example loss for one-hot (or mixed-up) `labels`."""
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


def make_train_step(model: Any, tx: optax.GradientTransformation, config: Any, mesh: Mesh,
                    shardings: Any = None, teacher: Optional[distill.Teacher] = None,
                    ) -> Callable[[State, Mapping[str, jax.Array]], Tuple[State, Dict]]:
  """Returns the jitted `train_step(state, batch) -> (state, metrics)` (state donated).

  `shardings` (a tree like the state; default all replicated) is both the input and the output
  sharding of the state: with sharded params XLA inserts the all-gathers before use and
  reduce-scatters the gradients, in this same function. With a `teacher`, its params are a
  (replicated) argument of the compiled step and its forward pass runs per microbatch on the
  same images (`distill`). With `config.mixup` the global batch is mixed first (`mixup`). A step
  whose loss, gradient norm or new weights are not finite returns the state unchanged, with
  `metrics['nonfinite']` set for the loop to stop on.
  """
  loss_kind = config.loss
  smoothing = config.label_smoothing
  ema_decay = config.ema_decay
  mixup_alpha = float(config.mixup)

  def loss_fn(params, images, labels, rng, teacher_params):
    if teacher is not None and distill.uses_token(model):  # DeiT: a head per target.
      logits, dist_logits = distill.head_logits(model, params, images, rng)
    else:
      logits = dist_logits = model.apply({'params': params}, images, train=True,
                                         rngs={'dropout': rng})
    loss = compute_loss(logits, labels, loss_kind, smoothing)
    if teacher is not None:
      loss = distill.distill_loss(config, dist_logits,
                                  distill.teacher_logits(teacher, teacher_params, images), loss)
    return loss.mean()

  def train_step(state, batch, teacher_params):
    # Dropout rng derived from the step: no rng state to carry, identical on every process.
    seed = jax.random.wrap_key_data(state['rng'])
    rng = jax.random.fold_in(seed, state['step'])
    images, labels = batch['image'], batch['label']
    if mixup_alpha:
      images, labels = mixup(images, labels, mixup_alpha, jax.random.fold_in(
          jax.random.fold_in(seed, MIXUP_STREAM), state['step']))
    loss, grads = accumulate_gradient(
        functools.partial(loss_fn, teacher_params=teacher_params), state['params'],
        images, labels, rng, config.accum_steps or 1)
    updates, opt_state = tx.update(grads, state['opt_state'], state['params'])
    params = optax.apply_updates(state['params'], updates)
    new_state = dict(state, params=params, opt_state=opt_state, step=state['step'] + 1)
    if ema_decay:  # Polyak average of the weights: new = d * old + (1 - d) * params, d warmed up.
      new_state['ema_params'] = optax.incremental_update(
          params, state['ema_params'], 1. - ema_decay_at(ema_decay, state['step']))
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


def make_eval_step(model: Any, mesh: Mesh, params_sharding: Any = None,
                   loss_kind: str = 'softmax_xent') -> Callable:
  """Returns jitted `eval_step(params, batch) -> {correct, loss, count}` as masked sums.

  `params_sharding` is the train state's (default replicated): eval reads the params in place.
  `loss_kind` is the training loss's (`config.loss`, without label smoothing), so the eval loss
  of a sigmoid run is the sigmoid loss it optimises.
  """

  def eval_step(params, batch):
    logits = model.apply({'params': params}, batch['image'], train=False)
    mask = batch['mask']
    correct = jnp.argmax(logits, -1) == jnp.argmax(batch['label'], -1)
    loss = compute_loss(logits, batch['label'], loss_kind)
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


def total_steps(config: Any, num_train_examples: int) -> int:
  """`total_steps`, or `num_epochs` over the training split at the global batch size."""
  if config.total_steps:
    return int(config.total_steps)
  if config.num_epochs:
    return max(int(config.num_epochs * num_train_examples // config.batch), 1)
  raise ValueError('Set --config.total_steps or --config.num_epochs.')


def validate_config(config: Any, mesh: Mesh) -> None:
  """Fails early, with one line each, on settings that would only break deep inside JAX."""
  accum = config.accum_steps or 1
  parallel.check_batch_size(config.batch, mesh, accum, 'batch')
  parallel.check_batch_size(config.batch_eval, mesh, 1, 'batch_eval')
  if config.param_sharding not in parallel.PARAM_SHARDINGS:
    raise ValueError(f'Unknown param_sharding={config.param_sharding!r}; use one of '
                     f'{", ".join(parallel.PARAM_SHARDINGS)}.')
  if config.loss not in LOSSES:
    raise ValueError(f'Unknown loss={config.loss!r}; use one of {", ".join(LOSSES)}.')
  distill.validate(config)
  image_ops.make_normalize(config.pp.mean, config.pp.std)  # Bad values: one line, now.
  if config.mixup < 0:
    raise ValueError(f'mixup={config.mixup} must be >= 0 (0 = off; 0.2 as in big_vision).')
  if not 0. <= config.ema_decay < 1.:
    raise ValueError(f'ema_decay={config.ema_decay} must be in [0, 1) (0 turns the weight '
                     'average off; 0.999 averages over ~1000 steps).')
  patch = config.model.patches.size[0] if 'patches' in config.model else 1
  if config.model.get('resnet') is None and config.pp.crop % patch:
    up = -(-config.pp.crop // patch) * patch
    raise ValueError(
        f'pp.crop={config.pp.crop} is not a multiple of the patch size {patch} of '
        f'{config.model.get("model_name")}; use --config.pp.crop={up} (images are resized to it) '
        f'or {presets.finetune_resolution(config.model)} (the published fine-tuning resolution).')


@dataclasses.dataclass
class Trainer:
  """Everything `train_and_evaluate` builds once: model, optimizer, mesh and compiled steps."""
  config: Any
  model: Any
  tx: optax.GradientTransformation
  schedule: optax.Schedule
  mesh: Mesh
  total_steps: int
  grid_shape: Tuple[int, int]
  info: Any


def preflight(config: Any, *, needs_pretrained: bool) -> Any:
  """Checks the dataset and the pretrained checkpoint together; one error names all missing."""
  problems, info = [], None
  try:
    info = input_pipeline.get_dataset_info(config)
  except input_pipeline.SplitOverlapError:
    raise  # Not a missing input: its own line.
  except ValueError as e:
    problems.append(str(e).strip().rstrip('.'))
  pretrained = store.pretrained_path(config) if needs_pretrained else None
  for path in filter(None, (pretrained, config.distill.teacher_path)):
    problem = store.check_available(path)
    if problem:
      problems.append(problem)
  if problems:
    raise ValueError('Missing inputs: ' + '; AND '.join(problems) + '.')
  return info


def _warmup_steps(config: Any, steps: int) -> int:
  warmup = config.warmup_steps
  if warmup >= steps:
    logging.warning('warmup_steps=%d >= total steps %d: using %d (short run).', warmup, steps,
                    steps // 10)
    return steps // 10
  return warmup


def build_trainer(config: Any, *, needs_pretrained: bool = True) -> Trainer:
  """Validates the config and inputs, then builds model, schedule, optimizer and mesh."""
  mesh = parallel.make_mesh()
  validate_config(config, mesh)
  info = preflight(config, needs_pretrained=needs_pretrained)
  steps = total_steps(config, info.num_train_examples)
  schedule = optim.learning_rate_schedule(
      total_steps=steps, base_lr=config.base_lr, decay_type=config.decay_type,
      warmup_steps=_warmup_steps(config, steps), linear_end=config.linear_end)
  model = models.get_model(config.model, num_classes=info.num_classes)
  grid = models.token_grid(config.model, (config.pp.crop, config.pp.crop))
  return Trainer(config, model, optim.make_optimizer(config, schedule), schedule, mesh, steps,
                 grid, info)


def init_state(trainer: Trainer, *, abstract: bool = False) -> State:
  """Initial train state: pretrained weights if configured, else a fresh init (seeded).

  Built directly in its sharding (`state_shardings`): no device ever holds a full sharded copy.
  """
  config = trainer.config
  dummy = jnp.zeros((1, config.pp.crop, config.pp.crop, 3), jnp.float32)
  seed_key = jax.random.key(config.seed)

  def fresh_params():
    return trainer.model.init(seed_key, dummy, train=False)['params']

  def make_state(params):
    state = {'params': params, 'opt_state': trainer.tx.init(params),
             'step': jnp.zeros((), jnp.int32), 'rng': jax.random.key_data(seed_key)}
    if config.ema_decay:  # Starts from the initial (or pretrained) weights.
      state['ema_params'] = jax.tree.map(jnp.copy, params)
    return state

  if abstract:
    return jax.eval_shape(lambda: make_state(fresh_params()))
  shardings = state_shardings(trainer)
  params = jax.jit(fresh_params, out_shardings=shardings['params'])()
  path = store.pretrained_path(config)
  if path:
    logging.info('Fine-tuning from %s', path)
    loaded = checkpoint.load_pretrained(
        pretrained_path=path, init_params=parallel.to_host(params), model_config=config.model,
        grid_shape=trainer.grid_shape, keep_head=config.keep_head)
    params = jax.device_put(loaded, shardings['params'])
  return jax.jit(make_state, out_shardings=shardings)(params)


def state_shardings(trainer: Trainer) -> Any:
  """The train state's shardings per `config.param_sharding` (a tree like the state)."""
  return parallel.state_shardings(init_state(trainer, abstract=True), trainer.mesh,
                                  trainer.config.param_sharding)


class _WithoutSteps(ocp.step.NameFormat):
  """orbax's standard step names, minus steps that could not be read.

  Hidden from the manager, a damaged step neither counts as the latest step (which would make
  orbax skip every save up to it) nor towards `keep_checkpoints` (which would delete it later).
  """

  def __init__(self, hidden: Sequence[int]):
    self._standard, self._hidden = ocp.step.standard_name_format(), frozenset(hidden)

  def build_name(self, step: int) -> str:
    return self._standard.build_name(step)

  def find_all(self, base_path: Any) -> Iterator[Any]:
    return (m for m in self._standard.find_all(base_path) if m.step not in self._hidden)

  def find_step(self, base_path: Any, step: int) -> Any:
    if step in self._hidden:
      raise ValueError(f'Step {step} in {base_path} is damaged and skipped by this run.')
    return self._standard.find_step(base_path, step)


def make_checkpoint_manager(workdir: str, config: Any,
                            damaged: Sequence[int] = ()) -> ocp.CheckpointManager:
  """The orbax manager of `workdir/checkpoints`; `damaged` steps stay on disk, unseen by it."""
  options = ocp.CheckpointManagerOptions(max_to_keep=config.keep_checkpoints,
                                         create=True, step_name_format=_WithoutSteps(damaged))
  # The handler is named so that `item_metadata` can read a checkpoint's tree before restoring.
  return ocp.CheckpointManager(os.path.abspath(os.path.join(workdir, 'checkpoints')),
                               options=options, item_handlers=ocp.StandardCheckpointHandler())


def save_checkpoint(manager: ocp.CheckpointManager, step: int, state: State) -> None:
  """Saves `state`, except over a damaged checkpoint of the same step (kept; never deleted)."""
  path = manager.directory / str(step)
  if path.exists() and step not in manager.all_steps():
    logging.warning('Not saving step %d: %s holds the damaged checkpoint named at start-up; '
                    'move it away to let this step be saved.', step, path)
    return
  manager.save(step, args=ocp.args.StandardSave(state))


def _leaf_shapes(tree: Any) -> Dict[str, Any]:
  # Simple key names: a named-tuple field (a dict on disk) reads the same as a dict key.
  return {jax.tree_util.keystr(path, simple=True, separator='/'): tuple(getattr(leaf, 'shape', ()))
          for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def state_mismatch(saved: Any, expected: Any) -> Optional[str]:
  """The first difference between a checkpoint's tree and the state this config builds."""
  saved, expected = _leaf_shapes(saved), _leaf_shapes(expected)
  missing, extra = sorted(expected.keys() - saved.keys()), sorted(saved.keys() - expected.keys())
  if missing:
    return f'it lacks {len(missing)} entries this config needs, e.g. {missing[0]}'
  if extra:
    return f'it has {len(extra)} entries this config does not, e.g. {extra[0]}'
  for key, shape in expected.items():
    if saved[key] != shape:
      return f'{key} has shape {saved[key]} there and {shape} here'
  return None


def _one_line(error: BaseException) -> str:
  lines = str(error).strip().splitlines() or ['']
  return f'{type(error).__name__}: {lines[0][:300]}'


def _agreed(read: Callable[[], Any]) -> Tuple[Any, Optional[str]]:
  """(read(), None), or (None, why) when it failed here or on another process.

  The processes agree before going on, so none enters a collective read that another skips.
  """
  try:
    value, error = read(), None
  except Exception as e:  # orbax and tensorstore raise many types for unreadable files.
    value, error = None, _one_line(e)
  ok = error is None
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # Only for multi-process runs.
    ok = bool(np.all(multihost_utils.process_allgather(np.int32(ok))))
  return (value, None) if ok else (None, error or 'unreadable on another process')


def _try_restore(manager: ocp.CheckpointManager, step: int,
                 abstract: State) -> Tuple[Optional[State], Optional[str]]:
  """(state, None), or (None, the error) when the step's files cannot be read on some process.

  A readable checkpoint of another config is not damage: it raises the usual ValueError.
  """
  saved, error = _agreed(lambda: manager.item_metadata(step).tree)
  if error:
    return None, error
  mismatch = state_mismatch(saved, abstract)
  if mismatch:
    raise ValueError(f'The checkpoint at step {step} in {manager.directory} was written by '
                     f'another config ({mismatch}; a different model, optim or ema_decay?): '
                     'rerun with that config, or start a new --workdir.')
  return _agreed(lambda: manager.restore(step, args=ocp.args.StandardRestore(abstract)))


def restore_or_init(trainer: Trainer,
                    manager: ocp.CheckpointManager) -> Tuple[State, Tuple[int, ...]]:
  """Resume order: the workdir's newest readable checkpoint > pretrained npz > scratch.

  Returns the state and the steps found damaged (newer than the one resumed from). Each is named
  in one log line and left on disk untouched; reopen the manager without them
  (`make_checkpoint_manager(..., damaged)`). With several processes a step counts as readable
  only if every process read it, so all resume from the same step.
  """
  steps = sorted(manager.all_steps(), reverse=True)
  if not steps:
    return init_state(trainer), ()
  abstract = jax.tree.map(lambda x, sharding: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                                                   sharding=sharding),
                          init_state(trainer, abstract=True), state_shardings(trainer))
  damaged = []
  for step in steps:
    state, error = _try_restore(manager, step, abstract)
    if error is None:
      logging.info('Resuming from checkpoint at step %d in %s', step, manager.directory)
      return state, tuple(damaged)
    logging.warning('Checkpoint %s/%d cannot be read (%s); left as it is, trying an older one.',
                    manager.directory, step, error)
    damaged.append(step)
  raise ValueError(f'No checkpoint in {manager.directory} can be read (steps '
                   f'{", ".join(map(str, damaged))}; see the log): start a new --workdir, or '
                   'move the damaged step directories out of it to start afresh.')


class StopSignal:
  """Turns SIGTERM into a flag the loop checks, so it can checkpoint before exiting."""

  def __init__(self):
    self.received = False
    self._previous = None
    if threading.current_thread() is threading.main_thread():
      self._previous = signal.signal(signal.SIGTERM, self._handle)

  def _handle(self, signum, frame):
    del signum, frame
    logging.warning('SIGTERM received: saving a checkpoint before exiting.')
    self.received = True

  def check(self, step: int, every: Optional[int]) -> bool:
    """Whether all processes stop after `step`; they agree, so they all save the same step.

    With several processes the flags are gathered (a host sync) only every `every` steps.
    """
    if jax.process_count() == 1:
      return self.received
    if not (every and step % every == 0):
      return False
    from jax.experimental import multihost_utils  # Only for multi-process runs.
    return bool(np.any(multihost_utils.process_allgather(np.int32(self.received))))

  def restore(self):
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)


def device_prefetch(batches: Iterator[Mapping[str, np.ndarray]], mesh: Mesh,
                    size: int) -> Iterator[Tuple[Mapping[str, jax.Array], float]]:
  """Keeps `size` batches already on device; yields (batch, seconds spent waiting for data)."""
  queue = []
  while True:
    while len(queue) < max(size, 1):
      start = time.perf_counter()
      host = next(batches)
      queue.append((parallel.put_batch(host, mesh), time.perf_counter() - start))
    yield queue.pop(0)


class ProgressLog:
  """One log line and one scalar record per interval: step, %, loss, lr, img/s/core, ETA.

  The loss is the mean over the interval's steps (summed on device: no host sync per step).
  """

  def __init__(self, writer, total: int, start_step: int, batch: int, history_path: str):
    self.writer, self.total, self.batch = writer, total, batch
    self.history_path = history_path
    self.last_step, self.last_time = start_step, time.time()
    self.start_step, self.start_time = start_step, time.time()
    self.data_wait = 0.
    self.loss_sum, self.loss_count = jnp.zeros((), jnp.float32), 0

  def add_loss(self, loss: jax.Array) -> None:
    self.loss_sum, self.loss_count = self.loss_sum + loss, self.loss_count + 1

  def train(self, step: int, lr: float) -> None:
    """Logs the interval ending at `step`; `lr` is the learning rate that step used."""
    loss = float(parallel.to_host(self.loss_sum)) / max(self.loss_count, 1)
    self.loss_sum, self.loss_count = jnp.zeros((), jnp.float32), 0
    now = time.time()
    steps = max(step - self.last_step, 1)
    img_s_core = self.batch * steps / max(now - self.last_time, 1e-9) / jax.device_count()
    done = step / self.total
    rate = (now - self.start_time) / max(step - self.start_step, 1)
    eta = (self.total - step) * rate
    wait = self.data_wait / max(now - self.last_time, 1e-9)
    logging.info('Step %d/%d (%.1f%%): loss=%.4f lr=%.3g img/s/core=%.1f data-wait=%.0f%% '
                 'ETA=%s', step, self.total, 100 * done, loss, lr, img_s_core, 100 * wait,
                 _fmt_seconds(eta))
    self.write(step, {'train_loss': loss, 'lr': lr, 'img_sec_core_train': img_s_core,
                      'data_wait_fraction': wait})
    self.last_step, self.last_time, self.data_wait = step, now, 0.

  def write(self, step: int, scalars: Dict[str, float]) -> None:
    self.writer.write_scalars(step, scalars)
    if jax.process_index() == 0:
      plotting.append_history(self.history_path, step, scalars)


def _fmt_seconds(seconds: float) -> str:
  seconds = int(seconds)
  return f'{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s'


def _is_due(step: int, every: Optional[int], total: int) -> bool:
  return step == total or bool(every and step % every == 0)


def final_params(state: State) -> Any:
  """The weights a run reports and exports: the weight average when `ema_decay` is set."""
  return state.get('ema_params', state['params'])


def exported_weights(config: Any) -> str:
  """The name of the weights `final_params` returns, as the log and metadata.json give it."""
  return 'ema' if config.ema_decay else 'raw'


def log_weight_average(config: Any, total: int) -> None:
  """Says which weights the run exports; warns when the average cannot have left its start."""
  if not config.ema_decay:
    return
  initial = ema_initial_weight(config.ema_decay, total)
  logging.info('Exporting the weight average (ema_decay=%g, warmed up as min(decay, '
               '(1+n)/(10+n))): after %d steps the initial weights are %.2g of it.',
               config.ema_decay, total, initial)
  if initial > 0.01:
    logging.warning('The weight average keeps %.0f%% of the initial weights after %d steps: '
                    'train longer or set --config.ema_decay=0 to export the raw weights.',
                    100 * initial, total)


def get_eval_splits(config: Any) -> Dict[str, Any]:
  """{'test': pp.test} plus 'val' (pp.val) and 'train' (pp.train_eval) when set, as EvalData."""
  specs = dict(test=config.pp.test, val=config.pp.val, train=config.pp.train_eval)
  return {name: input_pipeline.get_eval_data(config, spec) for name, spec in specs.items() if spec}


def run_eval(trainer: Trainer, eval_step: Callable, state: State, eval_data: Mapping[str, Any],
             progress: ProgressLog, step: int) -> Dict[str, float]:
  """Evaluates `final_params(state)` on every split of `eval_data` ('test' first; the others'
  metrics get the split's suffix: accuracy_val, accuracy_train); with a weight average, the raw
  weights on test too (`_raw`)."""
  start = time.time()
  result = evaluate(eval_step, final_params(state), eval_data['test'], trainer.mesh)
  seconds = time.time() - start
  logging.info('Step %d: test accuracy=%.4f loss=%.4f on %d examples (%.1fs)', step,
               result['accuracy'], result['loss'], result['num_examples'], seconds)
  scalars = {'accuracy_test': result['accuracy'], 'loss_test': result['loss'],
             'img_sec_core_test': result['num_examples'] / max(seconds, 1e-9)
             / jax.device_count()}
  for name, data in eval_data.items():
    if name == 'test':
      continue
    other = evaluate(eval_step, final_params(state), data, trainer.mesh)
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


def export_params(trainer: Trainer, params: Any, workdir: str, result: Dict[str, Any]) -> None:
  """Process 0 writes the final params as a published-format `workdir/params.npz`, and beside it
  `metadata.json`: the model, input size and label names a user needs without this config
  (embedded in the npz as well, so a copy under another name keeps it).

  Every process calls this: sharded params are gathered collectively first.
  """
  host = parallel.to_host(params)
  if jax.process_index() != 0:
    return
  config = trainer.config
  weights = exported_weights(config)
  extra = dict(ema_decay=config.ema_decay, accuracy_raw=result.get('accuracy_raw')
               ) if weights == 'ema' else {}
  description = dict(
      model_config=config.model, image_size=config.pp.crop, mean=tuple(config.pp.mean),
      std=tuple(config.pp.std), class_names=trainer.info.class_names, dataset=config.dataset,
      step=trainer.total_steps,
      batch=config.batch,
      accuracy=result.get('accuracy'), num_examples=result.get('num_examples'),
      weights=weights, **extra, **{k: v for k, v in result.items()
                                   if k.startswith(('accuracy_', 'num_examples_'))
                                   and k != 'accuracy_raw'})
  # The description goes inside the npz too: a renamed copy still says what model it is.
  path = checkpoint.save(host, os.path.join(workdir, store.PARAMS_FILE),
                         metadata=metadata_lib.describe_run(**description))
  metadata_lib.write_metadata(workdir, **description)
  logging.info('Exported the %s weights (%s) to %s (with %s)', weights,
               'weight average' if weights == 'ema' else 'not averaged', path,
               store.METADATA_FILE)
  raw, averaged = result.get('accuracy_raw'), result.get('accuracy')
  if raw is not None and averaged is not None and raw > averaged:
    # Chosen by the config, not by test accuracy (that would select on the test set).
    logging.warning('The raw weights evaluate better than the exported average (%.4f > %.4f); '
                    'rerun with --config.ema_decay=0 (or a smaller decay) to export them.',
                    raw, averaged)


def with_checkpoint_model(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """`config` with `model` read from `config.pretrained_path` when the config names none.

  This is how a timm hub folder, .safetensors file or hf-hub name (or any npz) is fine-tuned
  without a model name (`configs/hub.py`): the checkpoint says what it is; dropout stays 0.
  """
  if config.model is not None:
    return config
  if not config.pretrained_path:
    raise ValueError('config.model is not set: name a model (e.g. configs/vit.py:b16,DATASET) '
                     'or pass --config.pretrained_path=<checkpoint> to fine-tune what it holds.')
  path = store.resolve_name(config.pretrained_path)
  _, arch = loading.load_architecture(path)
  # What the shapes cannot tell (posemb 'none' vs 'sincos2d', ...) the file's description does:
  # the run's metadata.json, a <name>.json beside it or the one embedded in the npz.
  described = (None if timm_files.is_timm_source(path)
               else (metadata_lib.read_metadata(path) or {}).get('model'))
  if described:
    arch = architecture.conform(arch, described, store.METADATA_FILE)
  if arch.assumed:
    logging.warning('%s does not say %s: assumed. To state them, put a %s beside it (the format '
                    'of a run\'s %s) or name the model (configs/vit.py:MODEL,DATASET).',
                    config.pretrained_path, '; '.join(arch.assumed),
                    os.path.basename(metadata_lib.sidecar_path(path)), store.METADATA_FILE)
  config = ml_collections.ConfigDict(config.to_dict())
  config.model = arch.config
  logging.info('Model from %s: %s.', config.pretrained_path, config.model.model_name)
  return config.lock()


NORMALIZATION_FILE = 'input_normalization.json'


def with_checkpoint_normalization(config: ml_collections.ConfigDict, workdir: str
                                  ) -> ml_collections.ConfigDict:
  """`config` with `pp.mean`/`pp.std` of the weights `config.pretrained_path` holds.

  Only when the config leaves them at the official default and the weights expect others
  (CLIP's, DINOv2's or Swin's ImageNet values in a timm config.json, or a run fine-tuned with
  them): then training, eval and the exported metadata all use the weights' values. The choice
  is recorded in `workdir/input_normalization.json` on first start and read back on resume, so
  a resumed run's inputs never change midway, even when the pretrained file is gone by then.
  """
  pp = config.pp
  if not image_ops.is_official_normalization(pp.mean, pp.std):
    return config
  recorded = os.path.join(workdir, NORMALIZATION_FILE)
  if os.path.isfile(recorded):
    with open(recorded, encoding='utf-8') as f:
      saved = json.load(f)
    mean, std = tuple(saved['mean']), tuple(saved['std'])
  elif config.pretrained_path:
    path = store.resolve_name(config.pretrained_path)
    if store.is_remote(path) or store.check_available(path):
      return config  # A published npz (official inputs), or missing: preflight says so.
    mean, std = metadata_lib.input_normalization(path)
  else:
    return config
  if image_ops.is_official_normalization(mean, std):
    return config
  logging.info('Input normalisation of %s: (x / 255 - mean) / std with mean %s, std %s (not '
               'x / 127.5 - 1); set --config.pp.mean/--config.pp.std to choose others.',
               config.pretrained_path, mean, std)
  if jax.process_index() == 0 and not os.path.isfile(recorded):
    os.makedirs(workdir, exist_ok=True)
    with open(recorded, 'w', encoding='utf-8') as f:
      json.dump({'mean': list(mean), 'std': list(std), 'from': config.pretrained_path}, f)
  config = ml_collections.ConfigDict(config.to_dict())
  config.pp.mean, config.pp.std = tuple(mean), tuple(std)
  return config.lock()


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> Dict[str, Any]:
  """Trains (or continues training) per `config` in `workdir`; returns final eval metrics.

  Writes TensorBoard events, `metrics.jsonl` + `curves.png`, orbax checkpoints under
  `workdir/checkpoints` and the final `workdir/params.npz`. Returns `{'step': total, ...}` when
  finished, or `{'stopped_at': step, ...}` when SIGTERM stopped it with steps left (a checkpoint
  saved, no params.npz; `python -m vit_jax.main` exits 143 then). Without `config.model` the
  model is the one `config.pretrained_path` holds (`with_checkpoint_model`).
  """
  config = with_checkpoint_normalization(with_checkpoint_model(config), workdir)
  manager = make_checkpoint_manager(workdir, config)
  trainer = build_trainer(config, needs_pretrained=manager.latest_step() is None)
  state, damaged = restore_or_init(trainer, manager)
  if damaged:  # Reopened without them: see _WithoutSteps.
    manager.close()
    manager = make_checkpoint_manager(workdir, config, damaged)
  start = int(parallel.to_host(state['step']))
  logging.info('Model %s, %d classes, %d steps of batch %d; starting at step %d.',
               config.model.get('model_name'), trainer.info.num_classes, trainer.total_steps,
               config.batch, start)
  if start >= trainer.total_steps:  # A rerun of a finished run (the same command, same workdir).
    logging.warning('%s already trained all %d steps: evaluating and exporting it again, nothing '
                    'to train (raise total_steps or num_epochs to continue it).', workdir, start)
  log_weight_average(config, trainer.total_steps)
  writer = metric_writers.create_default_writer(workdir, just_logging=jax.process_index() > 0)
  progress = ProgressLog(writer, trainer.total_steps, start, config.batch,
                         os.path.join(workdir, 'metrics.jsonl'))
  eval_data = get_eval_splits(config)
  eval_step = make_eval_step(trainer.model, trainer.mesh, state_shardings(trainer)['params'],
                             config.loss)
  try:
    return _train_loop(trainer, state, start, manager, progress, eval_step, eval_data, workdir)
  finally:
    writer.flush()
    manager.wait_until_finished()  # Never leave a half-written checkpoint behind.
    manager.close()


def _train_loop(trainer: Trainer, state: State, start: int, manager: ocp.CheckpointManager,
                progress: ProgressLog, eval_step: Callable, eval_data: Any,
                workdir: str) -> Dict[str, Any]:
  config, total = trainer.config, trainer.total_steps
  teacher = distill.load_teacher(config, trainer.info.num_classes, trainer.mesh)
  train_step = make_train_step(trainer.model, trainer.tx, config, trainer.mesh,
                               state_shardings(trainer), teacher)
  batches = device_prefetch(input_pipeline.get_train_data(config, start_batch=start),
                            trainer.mesh, config.prefetch)
  stop = StopSignal()
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
      stopping = stop.check(step, config.progress_every)
      save_due = _is_due(step, config.checkpoint_every, total) or stopping
      if _is_due(step, config.progress_every, total) or save_due:
        _check_finite(nonfinite, checked_step, step, manager)
        checked_step = step
      if _is_due(step, config.progress_every, total):
        # Step `step` (1-based) was the optimizer's update number step - 1: that is its lr.
        progress.train(step, float(trainer.schedule(step - 1)))
      # After SIGTERM the grace period goes to the checkpoint, not to an eval due at this step.
      if _is_due(step, config.eval_every, total) and not stopping:
        result = run_eval(trainer, eval_step, state, eval_data, progress, step)
      if save_due:
        save_checkpoint(manager, step, state)
      if stopping:
        manager.wait_until_finished()
        logging.warning('Stopped at step %d after SIGTERM; rerun the same command to resume.',
                        step)
        return {'stopped_at': step, **result}
    manager.wait_until_finished()
  finally:
    stop.restore()
    batches.close()  # Its tf.data threads stop now, not at interpreter exit (where they hang).
  if not result:  # Nothing left to train (a finished run rerun) or no eval was due: report one.
    result = run_eval(trainer, eval_step, state, eval_data, progress, total)
  if jax.process_index() == 0:
    plotting.plot_curves(progress.history_path, os.path.join(workdir, 'curves.png'))
  export_params(trainer, final_params(state), workdir, result)
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


STAGE1_FILE = 'stage1.json'  # In the fine-tuning workdir: the stage-1 export it started from.


def stage1_source(params_path: str, step: int) -> Dict[str, Any]:
  """What identifies a stage-1 export: a sha256 of its arrays (names, dtypes, shapes, values) and
  the step it was exported at. Of the arrays, not the file: a rerun of a finished stage 1
  re-exports the same arrays into a zip with new timestamps."""
  digest = hashlib.sha256()
  with np.load(params_path, allow_pickle=False) as npz:
    for name in sorted(npz.files):
      array = npz[name]
      digest.update(f'{name}:{array.dtype.str}:{array.shape};'.encode())
      digest.update(np.ascontiguousarray(array).tobytes())
  return {'params_sha256': digest.hexdigest(), 'step': int(step)}


def _read_stage1(fine_dir: str) -> Optional[Dict[str, Any]]:
  path = os.path.join(fine_dir, STAGE1_FILE)
  if not os.path.exists(path):
    return None
  with open(path, encoding='utf-8') as f:
    return json.load(f)


def _has_progress(fine_dir: str) -> bool:
  """Whether stage 2 already trained here (a checkpoint or an export to resume or reuse)."""
  ckpt_dir = os.path.join(fine_dir, 'checkpoints')
  return (os.path.exists(os.path.join(fine_dir, 'params.npz'))
          or (os.path.isdir(ckpt_dir) and bool(os.listdir(ckpt_dir))))


def _free_name(path: str) -> str:
  candidate, n = path, 1
  while os.path.exists(candidate):
    n += 1
    candidate = f'{path}-{n}'
  return candidate


def tie_to_stage1(fine_dir: str, source: Dict[str, Any]) -> None:
  """Makes stage 2 fine-tune from this stage-1 export: a stage 2 that started from another one
  (stage 1 extended or rerun) is moved aside whole, never deleted, and starts afresh.

  The export stage 2 started from is recorded in `fine_dir/stage1.json`. A stage 2 with progress
  but no record (written by older code) cannot be vouched for and is moved aside too.
  """
  if jax.process_index() == 0:
    recorded = _read_stage1(fine_dir)
    if _has_progress(fine_dir) and recorded != source:
      was = f'step {recorded["step"]}' if recorded else 'an unrecorded stage-1 export'
      moved = _free_name(f'{fine_dir}.from-stage1-' + (f'step{recorded["step"]}' if recorded
                                                       else 'unknown'))
      os.rename(fine_dir, moved)
      logging.warning('Stage 1 changed since stage 2 started (stage 2 fine-tuned from %s, stage 1 '
                      'is now at step %d): the old stage 2 is moved to %s, fine-tuning restarts.',
                      was, source['step'], moved)
    if _read_stage1(fine_dir) != source:
      os.makedirs(fine_dir, exist_ok=True)
      with open(os.path.join(fine_dir, STAGE1_FILE), 'w', encoding='utf-8') as f:
        json.dump(source, f, indent=1)
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # Only for multi-process runs.
    multihost_utils.sync_global_devices('vit_jax: stage 2 tied to stage 1')


def pretrain_then_finetune(config: ml_collections.ConfigDict, workdir: str) -> Dict[str, Any]:
  """Runs `config.pretrain`, exports its npz, then fine-tunes `config.finetune` from that npz.

  Each stage has its own sub-workdir (so each resumes on its own); the fine-tuning stage may use
  a higher `pp.crop`, in which case the position embeddings are resized on load. Stage 2 is tied
  to the stage-1 export it started from (`tie_to_stage1`): extending stage 1 restarts stage 2.
  """
  pre_dir, fine_dir = os.path.join(workdir, 'pretrain'), os.path.join(workdir, 'finetune')
  logging.info('Stage 1/2: pretraining in %s', pre_dir)
  pre = train_and_evaluate(config.pretrain, pre_dir)
  if 'stopped_at' in pre:  # SIGTERM during stage 1: rerunning the command continues it.
    return {'pretrain': pre}
  finetune = ml_collections.ConfigDict(config.finetune.to_dict())
  finetune.pretrained_path = os.path.join(pre_dir, 'params.npz')
  tie_to_stage1(fine_dir, stage1_source(finetune.pretrained_path, pre['step']))
  logging.info('Stage 2/2: fine-tuning from %s at %dpx in %s', finetune.pretrained_path,
               finetune.pp.crop, fine_dir)
  fine = train_and_evaluate(finetune, fine_dir)
  if jax.process_index() == 0:
    plotting.plot_stages({'pretrain': os.path.join(pre_dir, 'metrics.jsonl'),
                          'finetune': os.path.join(fine_dir, 'metrics.jsonl')},
                         os.path.join(workdir, 'curves.png'))
  return {'pretrain': pre, 'finetune': fine}


__all__ = ['train_and_evaluate', 'pretrain_then_finetune', 'make_train_step', 'make_eval_step',
           'accumulate_gradient', 'evaluate']
