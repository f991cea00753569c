"""What `train_and_evaluate` builds once: the checked settings, model, optimizer, mesh and state.

`build_trainer` validates the run's settings (`settings.Run`, read from the config) and its
inputs (one line per problem, before any compilation) and builds the `Trainer`; `init_state`
makes the initial train state (pretrained weights or a seeded init) directly in its sharding;
`abstract_state` is the same tree as shapes, into which a checkpoint is restored.
"""

import dataclasses
from typing import Any, Dict, Optional, Tuple

import jax
import jax.numpy as jnp
import optax
from absl import logging
from jax.sharding import Mesh

from vit_jax import config_lib
from vit_jax import input_pipeline
from vit_jax import models
from vit_jax.weights import loading
from vit_jax.weights import store
from vit_jax.data import image_ops
from vit_jax import families
from vit_jax import presets
from vit_jax.training import distill
from vit_jax.training import fewshot
from vit_jax.training import from_checkpoint
from vit_jax.training import masked
from vit_jax.training import optim
from vit_jax.training import parallel
from vit_jax.training import settings

State = Dict[str, Any]


def total_steps(run: settings.Run, num_train_examples: int) -> int:
  """`total_steps`, or `num_epochs` over the training split at the global batch size."""
  if run.total_steps:
    return int(run.total_steps)
  if run.num_epochs:
    return max(int(run.num_epochs * num_train_examples // run.data.batch), 1)
  raise ValueError('Set --config.total_steps or --config.num_epochs.')


def validate_run(run: settings.Run, mesh: Mesh) -> None:
  """Fails early, with one line each, on settings that would only break deep inside JAX."""
  accum = run.accum_steps or 1
  parallel.check_batch_size(run.data.batch, mesh, accum, 'batch')
  parallel.check_batch_size(run.data.batch_eval, mesh, 1, 'batch_eval')
  config_lib.check_choice('param_sharding', run.param_sharding)
  config_lib.check_choice('loss', run.loss)
  distill.validate(run.distill)
  masked.validate(run.masked, run.model_config, crop=run.data.crop, mixup=run.mixup,
                  teacher_path=run.distill.teacher_path, pretrained=run.pretrained_location)
  image_ops.make_normalize(run.data.mean, run.data.std)  # Bad values: one line, now.
  if run.mixup < 0:
    raise ValueError(f'mixup={run.mixup} must be >= 0 (0 = off; 0.2 as in big_vision).')
  if not 0. <= run.ema_decay < 1.:
    raise ValueError(f'ema_decay={run.ema_decay} must be in [0, 1) (0 turns the weight '
                     'average off; 0.999 averages over ~1000 steps).')
  # Patch sizes that must divide the input (a hybrid's ResNet and a ResNet pad any size).
  model_config, crop = run.model_config, run.data.crop
  patch = families.FAMILIES[presets.family_of(model_config)].input_multiple(model_config)
  if crop % patch:
    up = -(-crop // patch) * patch
    raise ValueError(
        f'pp.crop={crop} is not a multiple of the patch size {patch} of '
        f'{model_config.get("model_name")}; use --config.pp.crop={up} (images are resized to it) '
        f'or {presets.finetune_resolution(model_config)} (the published fine-tuning resolution).')


@dataclasses.dataclass
class Trainer:
  """Everything `train_and_evaluate` builds once: model, optimizer, schedule, mesh, step count,
  and the run's settings they were built from."""
  run: settings.Run
  model: Any
  tx: optax.GradientTransformation
  schedule: optax.Schedule
  mesh: Mesh
  total_steps: int
  grid_shape: Tuple[int, int]
  info: Any


def preflight(run: settings.Run, *, needs_pretrained: bool) -> Any:
  """Checks the dataset and the pretrained checkpoint together; one error names all missing."""
  problems, info = [], None
  try:
    info = input_pipeline.get_dataset_info(run.data)
  except input_pipeline.SplitOverlapError:
    raise  # Not a missing input: its own line.
  except ValueError as e:
    problems.append(str(e).strip().rstrip('.'))
  locations = [run.pretrained_location() if needs_pretrained else None]
  if run.distill.teacher_path:
    try:
      locations.append(store.locate(run.distill.teacher_path))
    except store.CheckpointError as e:
      problems.append(str(e).strip().rstrip('.'))
  for location in filter(None, locations):
    problem = store.check_available(location)
    if problem:
      problems.append(problem)
  if problems:
    raise ValueError('Missing inputs: ' + '; AND '.join(problems) + '.')
  return info


def check_classes(run: settings.Run, info: Any) -> None:
  """Refuses to train or score a classifier on fewer than 2 classes (every prediction right:
  loss 0, accuracy 1); self-supervised pretraining reads any images."""
  problem = input_pipeline.too_few_classes(info.class_names)
  if problem and not masked.is_self_supervised(run.trainer):
    raise ValueError(f'{run.data.dataset}: {problem}: a classifier needs at least 2 classes to '
                     'be trained and scored; give it a folder per class (train/<class>/*.jpg), '
                     'or pretrain self-supervised on it (--config.trainer=mae).')


def _warmup_steps(run: settings.Run, steps: int) -> int:
  warmup = run.warmup_steps
  if warmup >= steps:
    logging.warning('warmup_steps=%d >= total steps %d: using %d (short run).', warmup, steps,
                    steps // 10)
    return steps // 10
  return warmup


def build_trainer(run: settings.Run, *, needs_pretrained: bool = True) -> Trainer:
  """Validates the run and its inputs, then builds model, schedule, optimizer and mesh."""
  mesh = parallel.make_mesh()
  validate_run(run, mesh)
  info = preflight(run, needs_pretrained=needs_pretrained)
  check_classes(run, info)
  # Its needs, now: not at its first evaluation, steps later.
  fewshot.check_datasets(run.fewshot, run.data)
  steps = total_steps(run, info.num_train_examples)
  schedule = optim.learning_rate_schedule(
      total_steps=steps, base_lr=run.base_lr, decay_type=run.decay_type,
      warmup_steps=_warmup_steps(run, steps), linear_end=run.linear_end)
  model = (masked.get_model(run.masked, run.model_config)
           if masked.is_self_supervised(run.trainer) else
           models.get_model(run.model_config, num_classes=info.num_classes))
  crop = run.data.crop
  grid = models.token_grid(run.model_config, (crop, crop))
  return Trainer(run, model, optim.make_optimizer(run.optimizer, schedule), schedule, mesh,
                 steps, grid, info)


def init_state(trainer: Trainer, *, abstract: bool = False,
               pretrained: Optional[from_checkpoint.PretrainedSource] = None) -> State:
  """Initial train state: pretrained weights if configured, else a fresh init (seeded).

  Built directly in its sharding (`state_shardings`): no device ever holds a full sharded copy.
  The pretrained checkpoint comes from `pretrained` (the run's source, opened once) when given.
  """
  run = trainer.run
  dummy = jnp.zeros((1, run.data.crop, run.data.crop, 3), jnp.float32)
  seed_key = jax.random.key(run.seed)

  def fresh_params():
    return trainer.model.init(seed_key, dummy, train=False)['params']

  def make_state(params):
    state = {'params': params, 'opt_state': trainer.tx.init(params),
             'step': jnp.zeros((), jnp.int32), 'rng': jax.random.key_data(seed_key)}
    if run.ema_decay:  # Starts from the initial (or pretrained) weights.
      state['ema_params'] = jax.tree.map(jnp.copy, params)
    return state

  if abstract:
    return jax.eval_shape(lambda: make_state(fresh_params()))
  shardings = state_shardings(trainer)
  params = jax.jit(fresh_params, out_shardings=shardings['params'])()
  location = run.pretrained_location()
  path = None if location is None else location.path
  if path:
    logging.info('Fine-tuning from %s', path)
    source = (pretrained or from_checkpoint.PretrainedSource()).open(path)
    loaded = loading.fit_source(source, parallel.to_host(params), run.model_config,
                                grid_shape=trainer.grid_shape, keep_head=run.keep_head,
                                class_names=trainer.info.class_names)
    params = jax.device_put(loaded, shardings['params'])
  return jax.jit(make_state, out_shardings=shardings)(params)


def state_shardings(trainer: Trainer) -> Any:
  """The train state's shardings per `param_sharding` (a tree like the state)."""
  return parallel.state_shardings(init_state(trainer, abstract=True), trainer.mesh,
                                  trainer.run.param_sharding)


def abstract_state(trainer: Trainer) -> State:
  """The train state as `jax.ShapeDtypeStruct`s with their shardings: what a checkpoint restores
  into (`weights.resume.restore_or_init`)."""
  return jax.tree.map(lambda x, sharding: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                                               sharding=sharding),
                      init_state(trainer, abstract=True), state_shardings(trainer))
