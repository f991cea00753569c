"""What `train_and_evaluate` builds once: the checked config, model, optimizer, mesh and state.

`build_trainer` validates the config and its inputs (one line per problem, before any
compilation) and builds the `Trainer`; `init_state` makes the initial train state (pretrained
weights or a seeded init) directly in its sharding; `abstract_state` is the same tree as shapes,
into which a checkpoint is restored.
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
  config_lib.check_choice('param_sharding', config.param_sharding)
  config_lib.check_choice('loss', config.loss)
  distill.validate(config)
  masked.validate(config)
  image_ops.make_normalize(config.pp.mean, config.pp.std)  # Bad values: one line, now.
  if config.mixup < 0:
    raise ValueError(f'mixup={config.mixup} must be >= 0 (0 = off; 0.2 as in big_vision).')
  if not 0. <= config.ema_decay < 1.:
    raise ValueError(f'ema_decay={config.ema_decay} must be in [0, 1) (0 turns the weight '
                     'average off; 0.999 averages over ~1000 steps).')
  # Patch sizes that must divide the input (a hybrid's ResNet and a ResNet pad any size).
  patch = families.FAMILIES[presets.family_of(config.model)].input_multiple(config.model)
  if config.pp.crop % patch:
    up = -(-config.pp.crop // patch) * patch
    raise ValueError(
        f'pp.crop={config.pp.crop} is not a multiple of the patch size {patch} of '
        f'{config.model.get("model_name")}; use --config.pp.crop={up} (images are resized to it) '
        f'or {presets.finetune_resolution(config.model)} (the published fine-tuning resolution).')


@dataclasses.dataclass
class Trainer:
  """Everything `train_and_evaluate` builds once: model, optimizer, schedule, mesh, step count."""
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
    info = input_pipeline.get_dataset_info(settings.data(config))
  except input_pipeline.SplitOverlapError:
    raise  # Not a missing input: its own line.
  except ValueError as e:
    problems.append(str(e).strip().rstrip('.'))
  locations = [store.pretrained_location(config) if needs_pretrained else None]
  if config.distill.teacher_path:
    try:
      locations.append(store.locate(config.distill.teacher_path))
    except store.CheckpointError as e:
      problems.append(str(e).strip().rstrip('.'))
  for location in filter(None, locations):
    problem = store.check_available(location)
    if problem:
      problems.append(problem)
  if problems:
    raise ValueError('Missing inputs: ' + '; AND '.join(problems) + '.')
  return info


def check_classes(config: Any, info: Any) -> None:
  """Refuses to train or score a classifier on fewer than 2 classes (every prediction right:
  loss 0, accuracy 1); self-supervised pretraining reads any images."""
  problem = input_pipeline.too_few_classes(info.class_names)
  if problem and not masked.is_self_supervised(config):
    raise ValueError(f'{config.dataset}: {problem}: a classifier needs at least 2 classes to be '
                     'trained and scored; give it a folder per class (train/<class>/*.jpg), or '
                     'pretrain self-supervised on it (--config.trainer=mae).')


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
  check_classes(config, info)
  # Its needs, now: not at its first evaluation, steps later.
  fewshot.check_datasets(settings.fewshot(config), settings.data(config))
  steps = total_steps(config, info.num_train_examples)
  schedule = optim.learning_rate_schedule(
      total_steps=steps, base_lr=config.base_lr, decay_type=config.decay_type,
      warmup_steps=_warmup_steps(config, steps), linear_end=config.linear_end)
  model = (masked.get_model(config) if masked.is_self_supervised(config) else
           models.get_model(config.model, num_classes=info.num_classes))
  grid = models.token_grid(config.model, (config.pp.crop, config.pp.crop))
  return Trainer(config, model, optim.make_optimizer(config, schedule), schedule, mesh, steps,
                 grid, info)


def init_state(trainer: Trainer, *, abstract: bool = False,
               pretrained: Optional[from_checkpoint.PretrainedSource] = None) -> State:
  """Initial train state: pretrained weights if configured, else a fresh init (seeded).

  Built directly in its sharding (`state_shardings`): no device ever holds a full sharded copy.
  The pretrained checkpoint comes from `pretrained` (the run's source, opened once) when given.
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
    source = (pretrained or from_checkpoint.PretrainedSource()).open(path)
    loaded = loading.fit_source(source, parallel.to_host(params), config.model,
                                grid_shape=trainer.grid_shape, keep_head=config.keep_head,
                                class_names=trainer.info.class_names)
    params = jax.device_put(loaded, shardings['params'])
  return jax.jit(make_state, out_shardings=shardings)(params)


def state_shardings(trainer: Trainer) -> Any:
  """The train state's shardings per `config.param_sharding` (a tree like the state)."""
  return parallel.state_shardings(init_state(trainer, abstract=True), trainer.mesh,
                                  trainer.config.param_sharding)


def abstract_state(trainer: Trainer) -> State:
  """The train state as `jax.ShapeDtypeStruct`s with their shardings: what a checkpoint restores
  into (`weights.resume.restore_or_init`)."""
  return jax.tree.map(lambda x, sharding: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                                               sharding=sharding),
                      init_state(trainer, abstract=True), state_shardings(trainer))
