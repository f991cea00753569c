"""Train loop: fine-tune from npz, pretrain, accumulation, exact resume, exact eval, errors."""

import glob
import json
import os
import signal
import threading
import time
from unittest import mock

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from vit_jax import checkpoint
from vit_jax.weights import resume
from vit_jax import config_lib
from vit_jax import input_pipeline
from vit_jax import main
from vit_jax import models
from vit_jax.training import evaluation
from vit_jax.training import losses
from vit_jax.training import optim
from vit_jax.training import parallel
from vit_jax.training import run_record
from vit_jax.training import settings
from vit_jax.training import stages
from vit_jax import train
from vit_jax.weights import npz_format


def make_config(**overrides) -> ml_collections.ConfigDict:
  """The `testing` preset (hidden 10, 1 layer) on mock CIFAR-10 at 32px: seconds per run."""
  config = config_lib.with_model(config_lib.get_config(), 'testing')
  config.model.transformer.dropout_rate = 0.
  config.dataset = 'cifar10'
  config.pp.update(dict(train='train', test='test', crop=32, train_aug='flip'))
  config.update(dict(
      pretrained_dir='', total_steps=6, batch=4, batch_eval=4, accum_steps=1, warmup_steps=1,
      base_lr=0.1, optim_dtype='float32', shuffle_buffer=16, progress_every=2, eval_every=3,
      checkpoint_every=2, prefetch=1))
  config.update(overrides)
  return config



def final_params(workdir):
  return checkpoint.load(os.path.join(workdir, 'params.npz'))


def assert_trees_close(a, b, atol=1e-6):
  flat_a, flat_b = npz_format.flatten(a), npz_format.flatten(b)
  assert flat_a.keys() == flat_b.keys()
  for key in flat_a:
    np.testing.assert_allclose(flat_a[key], flat_b[key], atol=atol, err_msg=key)


def write_pretrained_npz(path, crop=16, representation_size=None):
  """A `testing` checkpoint at a lower resolution than the fine-tuning run (posemb resize)."""
  model = models.get_model('testing', num_classes=21843, representation_size=representation_size)
  params = model.init(jax.random.key(1), jnp.zeros((1, crop, crop, 3)), train=False)['params']
  checkpoint.save(jax.tree.map(lambda x: x + 0.01, params), path)
  return path


def test_finetune_from_npz_writes_events_and_params(tmp_path, mock_cifar10):
  npz = write_pretrained_npz(str(tmp_path / 'pre.npz'), representation_size=10)
  workdir = str(tmp_path / 'run')
  result = train.train_and_evaluate(make_config(pretrained_path=npz), workdir)
  assert result['step'] == 6 and result['num_examples'] == 10
  params = final_params(workdir)
  assert 'pre_logits' not in params  # representation_size=None drops it, as official.
  assert params['Transformer']['posembed_input']['pos_embedding'].shape == (1, 5, 10)
  assert glob.glob(os.path.join(workdir, 'events.out.tfevents.*'))
  assert os.path.exists(os.path.join(workdir, 'curves.png'))
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    keys = set().union(*(eval(line.replace('NaN', 'None')).keys() for line in f))
  assert {'train_loss', 'accuracy_test', 'lr', 'img_sec_core_train'} <= keys


def fixed_batch_step(config, decay_type, total_steps, warmup_steps):
  """A jitted train step, its initial state and one fixed random batch (4 classes, 32px)."""
  model = models.get_model(config.model, num_classes=4)
  tx = optim.make_optimizer(settings.optimizer(config), optim.learning_rate_schedule(
      total_steps=total_steps, base_lr=config.base_lr, decay_type=decay_type,
      warmup_steps=warmup_steps))
  mesh = parallel.make_mesh()
  rng = np.random.default_rng(0)
  batch = parallel.put_batch({
      'image': rng.uniform(-1, 1, (8, 32, 32, 3)).astype(np.float32),
      'label': np.eye(4, dtype=np.float32)[rng.integers(0, 4, 8)]}, mesh)
  params = model.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)), train=False)['params']
  state = {'params': params, 'opt_state': tx.init(params), 'step': jnp.zeros((), jnp.int32),
           'rng': jax.random.key_data(jax.random.key(0))}
  if config.get('ema_decay'):
    state['ema_params'] = jax.tree.map(np.array, params)  # Own buffers: the state is donated.
  return (train.make_train_step(model, tx, settings.read(config), mesh),
          parallel.put_replicated(state, mesh), batch)


class _PooledLinear(nn.Module):
  """A model that compiles in a moment: mean-pooled pixels → 4 logits."""

  @nn.compact
  def __call__(self, images, *, train):
    del train
    return nn.Dense(4)(images.mean((1, 2)) ** 2)


def test_uint8_batches_train_as_the_float_batches_they_normalise_to():
  """`pp.uint8_batches`: the step normalises a uint8 batch on the device; its loss and update
  are those of the float batch the pipeline would have sent (whole-level pixels: no rounding)."""
  rng = np.random.default_rng(1)
  pixels = rng.integers(0, 256, (8, 4, 4, 3)).astype(np.uint8)
  labels = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 8)]
  model, mesh, tx = _PooledLinear(), parallel.make_mesh(), optax.sgd(0.1)
  params = jax.device_get(model.init(jax.random.key(0), jnp.zeros((1, 4, 4, 3)),
                                    train=False)['params'])  # Host copies: the state is donated.
  results = []
  for uint8 in (False, True):
    config = make_config()
    config.pp.uint8_batches = uint8
    state = {'params': params, 'opt_state': tx.init(params), 'step': jnp.zeros((), jnp.int32),
             'rng': jax.random.key_data(jax.random.key(0))}
    images = pixels if uint8 else pixels.astype(np.float32) / 127.5 - 1.
    step = train.make_train_step(model, tx, settings.read(config), mesh)
    results.append(step(parallel.put_replicated(state, mesh),
                        parallel.put_batch({'image': images, 'label': labels}, mesh)))
  (float_state, float_metrics), (uint8_state, uint8_metrics) = results
  np.testing.assert_allclose(uint8_metrics['loss'], float_metrics['loss'], rtol=1e-6)
  assert_trees_close(jax.device_get(uint8_state['params']),
                     jax.device_get(float_state['params']))


def test_pretraining_loss_falls_on_a_fixed_batch():
  config = make_config(optim='adamw', base_lr=1e-2, weight_decay=0.1, grad_norm_clip=1.)
  step, state, batch = fixed_batch_step(config, 'linear', total_steps=30, warmup_steps=3)
  history = []
  for _ in range(30):
    state, metrics = step(state, batch)
    history.append(float(metrics['loss']))
  assert all(np.isfinite(history))
  assert history[-1] < 0.5 * history[0]


def test_pretrain_then_finetune_chain(tmp_path, mock_cifar10):
  config = ml_collections.ConfigDict()
  config.trainer = 'pretrain_then_finetune'
  config.pretrain = make_config(optim='adamw', base_lr=1e-3, pp=dict(crop=16))
  config.finetune = make_config(total_steps=2, pp=dict(crop=32))
  result = main.get_trainer(config.trainer)(config, str(tmp_path))
  assert result['finetune']['num_examples'] == 10
  pre = final_params(str(tmp_path / 'pretrain'))
  fine = final_params(str(tmp_path / 'finetune'))
  assert pre['Transformer']['posembed_input']['pos_embedding'].shape == (1, 2, 10)
  assert fine['Transformer']['posembed_input']['pos_embedding'].shape == (1, 5, 10)


def test_extending_stage_1_restarts_stage_2_from_the_new_export(tmp_path, mock_cifar10):
  config = ml_collections.ConfigDict()
  config.trainer = 'pretrain_then_finetune'
  config.pretrain = make_config(optim='adamw', base_lr=1e-3, pp=dict(crop=16), eval_every=0)
  config.finetune = make_config(total_steps=2, pp=dict(crop=32), eval_every=0)
  train.pretrain_then_finetune(config, str(tmp_path))
  old_fine = final_params(str(tmp_path / 'finetune'))
  train.pretrain_then_finetune(config, str(tmp_path))  # Unchanged rerun: nothing restarts.
  assert not glob.glob(str(tmp_path / 'finetune.*'))
  assert_trees_close(final_params(str(tmp_path / 'finetune')), old_fine, atol=0)

  config.pretrain.total_steps = 8  # Stage 1 extended: stage 2 must follow the new export.
  train.pretrain_then_finetune(config, str(tmp_path))
  moved = str(tmp_path / 'finetune.from-stage1-step6')
  assert_trees_close(final_params(moved), old_fine, atol=0)  # Kept whole, not deleted.
  recorded = json.load(open(tmp_path / 'finetune' / stages.STAGE1_FILE))
  assert recorded == stages.stage1_source(str(tmp_path / 'pretrain' / 'params.npz'), 8)
  new_fine = npz_format.flatten(final_params(str(tmp_path / 'finetune')))
  assert any(np.any(new_fine[key] != value)  # Fine-tuned again, not the old export.
             for key, value in npz_format.flatten(old_fine).items())


def test_accumulation_equals_full_batch_gradient():
  model = models.get_model('testing', num_classes=5)
  rng = np.random.default_rng(0)
  images = jnp.asarray(rng.uniform(-1, 1, (8, 32, 32, 3)), jnp.float32)
  labels = jax.nn.one_hot(rng.integers(0, 5, 8), 5)
  params = model.init(jax.random.key(0), images[:1], train=False)['params']
  params = jax.tree.map(lambda x: x + 0.05, params)

  def loss_fn(p, x, y, key):
    return losses.compute_loss(model.apply({'params': p}, x, train=False), y).mean()

  full = train.accumulate_gradient(loss_fn, params, images, labels, jax.random.key(0), 1)
  accum = train.accumulate_gradient(loss_fn, params, images, labels, jax.random.key(0), 4)
  np.testing.assert_allclose(full[0], accum[0], rtol=1e-6)
  # fp32 sums in another order: differences scale with the gradients (1.1e-6 was seen where the
  # largest is ~0.3); a missing or mis-weighted microbatch is off by >10%.
  scale = max(float(np.abs(g).max()) for g in jax.tree.leaves(full[1]))
  for g_full, g_acc in zip(jax.tree.leaves(full[1]), jax.tree.leaves(accum[1])):
    np.testing.assert_allclose(g_full, g_acc, rtol=1e-5, atol=2e-5 * scale)


def test_split_microbatches_is_strided():
  x = jnp.arange(8)
  np.testing.assert_array_equal(train.split_microbatches(x, 4), [[0, 4], [1, 5], [2, 6], [3, 7]])


def crash_at(step_to_crash):
  """Wraps make_train_step so the run dies (like a kill) before running `step_to_crash`."""
  real = train.make_train_step

  def factory(*args, **kwargs):
    step_fn = real(*args, **kwargs)

    def wrapped(state, batch):
      if int(state['step']) + 1 == step_to_crash:
        raise KeyboardInterrupt('simulated kill')
      return step_fn(state, batch)
    return wrapped
  return mock.patch.object(train, 'make_train_step', factory)


def killed_and_straight(config, tmp_path, crash_step):
  """Runs `config` straight through, and again killed before `crash_step` then resumed by
  the same call; returns (resumed workdir, straight workdir) once both finished."""
  straight, killed = str(tmp_path / 'straight'), str(tmp_path / 'killed')
  train.train_and_evaluate(config, straight)
  with crash_at(crash_step), pytest.raises(KeyboardInterrupt):
    train.train_and_evaluate(config, killed)
  assert os.listdir(os.path.join(killed, 'train_state'))  # What the resume starts from.
  assert train.train_and_evaluate(config, killed)['step'] == config.total_steps
  return killed, straight


@pytest.mark.parametrize('ema_decay', [0., 0.5])
def test_killed_run_resumes_to_identical_params(tmp_path, mock_cifar10, ema_decay):
  config = make_config(total_steps=6, checkpoint_every=2, eval_every=0, ema_decay=ema_decay)
  train.train_and_evaluate(config, str(tmp_path / 'straight'))
  workdir = str(tmp_path / 'killed')
  with crash_at(6), pytest.raises(KeyboardInterrupt):
    train.train_and_evaluate(config, workdir)
  assert sorted(os.listdir(os.path.join(workdir, 'train_state'))) == ['2', '4']
  result = train.train_and_evaluate(config, workdir)  # Continues at step 4.
  assert result['step'] == 6
  assert_trees_close(final_params(workdir), final_params(str(tmp_path / 'straight')))


def test_a_run_directory_of_an_earlier_version_resumes_from_its_checkpoints_folder(
    tmp_path, mock_cifar10):
  """Run directories written before 2026-11-27 hold their saved states in `checkpoints/`: a
  rerun resumes from there and continues in place (nothing moved, nothing trained twice)."""
  config = make_config(total_steps=6, checkpoint_every=2, eval_every=0)
  train.train_and_evaluate(config, str(tmp_path / 'straight'))
  workdir = str(tmp_path / 'old')
  with crash_at(6), pytest.raises(KeyboardInterrupt):
    train.train_and_evaluate(config, workdir)
  os.rename(os.path.join(workdir, 'train_state'), os.path.join(workdir, 'checkpoints'))
  assert train.train_and_evaluate(config, workdir)['step'] == 6
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints'))) == ['2', '4', '6']
  assert not os.path.exists(os.path.join(workdir, 'train_state'))
  assert_trees_close(final_params(workdir), final_params(str(tmp_path / 'straight')))


@pytest.mark.parametrize('first,second,difference', [
    (dict(ema_decay=0.), dict(ema_decay=0.5), r'it lacks \d+ entries this config needs'),
    (dict(ema_decay=0.5), dict(ema_decay=0.), r'it has \d+ entries this config does not'),
    (dict(optim='sgd'), dict(optim='adamw'), r'it (lacks|has) \d+ entries'),
    (dict(), dict(model=dict(hidden_size=12)),
     r'\S+/bias has shape \(10,\) there and \(12,\) here'),
])
def test_resume_under_another_config_is_a_clear_error(tmp_path, mock_cifar10, first, second,
                                                      difference):
  workdir = str(tmp_path / 'run')
  train.train_and_evaluate(make_config(total_steps=2, eval_every=0, **first), workdir)
  npz = open(os.path.join(workdir, 'params.npz'), 'rb').read()
  # The run's record refuses first (test_run_record.py); continued anyway, the checkpoint's
  # own tree still stops it.
  with pytest.raises(run_record.ChangedInputsError, match=r'other inputs: config '):
    train.train_and_evaluate(make_config(total_steps=4, eval_every=0, **second), workdir)
  with pytest.raises(ValueError, match=r'step 2 .* written by another config \(' + difference):
    train.train_and_evaluate(make_config(total_steps=4, eval_every=0, allow_changed_inputs=True,
                                         **second), workdir)
  assert os.listdir(os.path.join(workdir, 'train_state')) == ['2']
  assert open(os.path.join(workdir, 'params.npz'), 'rb').read() == npz  # Nothing overwritten.


def test_sigterm_saves_and_rerun_resumes(tmp_path, mock_cifar10):
  config = make_config(total_steps=6, checkpoint_every=100, eval_every=0)
  real = train.make_train_step

  def factory(*args, **kwargs):
    step_fn = real(*args, **kwargs)

    def wrapped(state, batch):
      if int(state['step']) == 2:
        os.kill(os.getpid(), signal.SIGTERM)
      return step_fn(state, batch)
    return wrapped

  workdir = str(tmp_path / 'run')
  with mock.patch.object(train, 'make_train_step', factory):
    result = train.train_and_evaluate(config, workdir)
  assert result['stopped_at'] == 3
  assert os.listdir(os.path.join(workdir, 'train_state')) == ['3']
  assert not os.path.exists(os.path.join(workdir, 'params.npz'))
  assert train.train_and_evaluate(config, workdir)['step'] == 6


def test_sigterm_returns_without_waiting_for_the_input_pipeline_to_close(tmp_path, mock_cifar10):
  """tf.data can take up to 60 s to destroy an iterator (it waits for its tuning thread's sleep):
  after SIGTERM the run returns without waiting for that, its grace period is for the
  checkpoint (issue 62: 48 s between the checkpoint and the exit)."""
  config = make_config(total_steps=6, checkpoint_every=100, eval_every=0)
  real_data, real_step, released, signalled = (input_pipeline.get_train_data,
                                               train.make_train_step, threading.Event(), [])

  def slow_to_close(*args, **kwargs):
    try:
      yield from real_data(*args, **kwargs)
    finally:
      released.wait(40)  # As tf.data destroying an iterator while its tuning thread sleeps.

  def factory(*args, **kwargs):
    step_fn = real_step(*args, **kwargs)

    def wrapped(state, batch):
      if int(state['step']) == 2:
        signalled.append(time.time())
        os.kill(os.getpid(), signal.SIGTERM)
      return step_fn(state, batch)
    return wrapped

  workdir = str(tmp_path / 'run')
  try:
    with mock.patch.object(input_pipeline, 'get_train_data', slow_to_close), \
        mock.patch.object(train, 'make_train_step', factory):
      result = train.train_and_evaluate(config, workdir)
    seconds = time.time() - signalled[0]
  finally:
    released.set()
  assert result['stopped_at'] == 3 and os.listdir(os.path.join(workdir, 'train_state')) == ['3']
  assert seconds < 20, seconds


def test_sigterm_at_an_eval_step_saves_without_evaluating_first(tmp_path, mock_cifar10):
  config = make_config(total_steps=6, checkpoint_every=100, eval_every=3)
  real_step, real_eval, evaluated = train.make_train_step, evaluation.run_eval, []

  def factory(*args, **kwargs):
    step_fn = real_step(*args, **kwargs)

    def wrapped(state, batch):
      if int(state['step']) == 2:  # Step 3, where an eval is due.
        os.kill(os.getpid(), signal.SIGTERM)
      return step_fn(state, batch)
    return wrapped

  def run_eval(*args):
    evaluated.append(args[-1])
    return real_eval(*args)

  workdir = str(tmp_path / 'run')
  with mock.patch.object(train, 'make_train_step', factory), mock.patch.object(
      evaluation, 'run_eval', run_eval):
    assert train.train_and_evaluate(config, workdir)['stopped_at'] == 3
    assert not evaluated and os.listdir(os.path.join(workdir, 'train_state')) == ['3']
  assert train.train_and_evaluate(config, workdir)['step'] == 6


def test_rerunning_a_finished_run_says_so_and_trains_nothing(tmp_path, mock_cifar10, caplog):
  """The same command twice (issue 29): the second run reports it has finished."""
  config = make_config(total_steps=2, eval_every=0)
  workdir = str(tmp_path / 'run')
  train.train_and_evaluate(config, workdir)
  params = final_params(workdir)
  with caplog.at_level('WARNING'):
    assert train.train_and_evaluate(config, workdir)['step'] == 2
  said = [r.getMessage() for r in caplog.records if 'already trained all 2 steps' in r.getMessage()]
  assert len(said) == 1, [r.getMessage() for r in caplog.records]
  assert os.listdir(os.path.join(workdir, 'train_state')) == ['2']
  assert_trees_close(final_params(workdir), params, atol=0)


def test_ema_step_is_the_polyak_average_of_the_weights():
  config = make_config(optim='adamw', base_lr=1e-2, ema_decay=0.9)
  step, state, batch = fixed_batch_step(config, 'cosine', total_steps=10, warmup_steps=0)
  params = jax.device_get(state['params'])
  expected = params
  for decay in (1 / 10, 2 / 11, 3 / 12):  # Warmed up: min(0.9, (1 + n) / (10 + n)).
    state, _ = step(state, batch)
    new = jax.device_get(state['params'])
    expected = jax.tree.map(lambda e, p, d=decay: d * e + (1 - d) * p, expected, new)
    assert_trees_close(jax.device_get(state['ema_params']), expected)
  moved = jax.tree.map(lambda e, p: np.abs(e - p).max(), expected, params)
  assert max(jax.tree.leaves(moved)) > 1e-3  # The weights moved, so the check above bites.


def test_ema_run_exports_the_average_and_reports_the_raw_accuracy(tmp_path, mock_cifar10):
  plain = str(tmp_path / 'plain')
  averaged = str(tmp_path / 'ema')
  train.train_and_evaluate(make_config(eval_every=0), plain)
  result = train.train_and_evaluate(make_config(eval_every=0, ema_decay=0.5), averaged)
  # The average does not change training: its raw weights are the plain run's.
  state = resume.make_checkpoint_manager(averaged, make_config().keep_checkpoints).restore(6)
  assert_trees_close(jax.device_get(state['params']), final_params(plain))
  assert_trees_close(jax.device_get(state['ema_params']), final_params(averaged))
  flat_plain = npz_format.flatten(final_params(plain))
  flat_ema = npz_format.flatten(final_params(averaged))
  assert any(not np.allclose(flat_plain[k], flat_ema[k]) for k in flat_plain)
  assert 0. <= result['accuracy_raw'] <= 1.
  with open(os.path.join(averaged, 'metrics.jsonl')) as f:
    assert any('accuracy_test_raw' in line for line in f)


def test_exact_eval_counts_every_example(tmp_path, mock_cifar10):
  result = train.train_and_evaluate(make_config(total_steps=1, batch_eval=4),
                                    str(tmp_path / 'run'))
  assert result['num_examples'] == 10  # 3 batches of 4, the last padded and masked.
  correct = result['accuracy'] * 10
  assert 0. <= result['accuracy'] <= 1. and correct == round(correct)


def test_non_finite_loss_stops_with_step_range_and_keeps_checkpoint(tmp_path, mock_cifar10):
  config = make_config(total_steps=8, checkpoint_every=2, progress_every=2, optim='adamw',
                       grad_norm_clip=0., base_lr=1e38, warmup_steps=0, eval_every=0)
  workdir = str(tmp_path / 'run')
  with pytest.raises(train.NonFiniteLossError, match=r'between steps \d+ and \d+'):
    train.train_and_evaluate(config, workdir)
  assert not os.path.exists(os.path.join(workdir, 'params.npz'))


@pytest.mark.parametrize('overrides,message', [
    (dict(batch=6, accum_steps=4), 'not divisible'),
    (dict(batch_eval=0), 'batch_eval'),
    (dict(pp=dict(crop=30)), 'multiple of the patch size 16 of testing; use --config.pp.crop=32'),
    (dict(loss='hinge'), 'Unknown loss'),
    (dict(ema_decay=1.), r'ema_decay=1.0 must be in \[0, 1\)'),
    (dict(mixup=-1.), r'mixup=-1.0 must be >= 0'),
    (dict(optim='adamw', weight_decay_on='biases'), 'Unknown weight_decay_on'),
    (dict(optim='lamb'), 'Unknown optim'),
    (dict(pretrained_path='/nonexistent/ViT-B_16.npz'), 'not found'),
])
def test_bad_config_is_a_clear_error(tmp_path, mock_cifar10, overrides, message):
  with pytest.raises(ValueError, match=message):
    train.train_and_evaluate(make_config(**overrides), str(tmp_path / 'run'))


def test_unknown_trainer():
  with pytest.raises(ValueError, match='Unknown trainer'):
    main.get_trainer('nope')


def test_finetune_on_an_image_directory_from_a_local_npz(tmp_path):
  from test_distributed import write_image_dataset  # Tiny PNG folders, 3 classes.
  dataset = write_image_dataset(str(tmp_path / 'data'))
  npz = write_pretrained_npz(str(tmp_path / 'pre.npz'))
  workdir = str(tmp_path / 'run')
  config = make_config(dataset=dataset, pretrained_path=npz, total_steps=4, eval_every=2)
  result = train.train_and_evaluate(config, workdir)
  assert result['num_examples'] == 9  # 3 classes x 3 test images, all counted.
  assert final_params(workdir)['head']['kernel'].shape == (10, 3)
  assert glob.glob(os.path.join(workdir, 'events.out.tfevents.*'))


def test_inference_time_trainer(tmp_path):
  config = ml_collections.ConfigDict(dict(
      trainer='inference_time', model_name='testing', batch=4, num_classes=10, image_size=32,
      steps=2, initial_steps=1))
  result = main.get_trainer(config.trainer)(config, str(tmp_path))
  assert result['imgs_sec_core_median'] > 0


def test_validation_and_train_subset_accuracies_use_their_splits(tmp_path, mock_cifar10):
  """pp.val and pp.train_eval are evaluated with the final params on their own splits: a
  train_eval split equal to the test split gives the test accuracy exactly."""
  workdir = tmp_path / 'run'
  config = make_config(eval_every=6)
  config.pp.update(dict(train='train[:50%]', val='train[50%:]', train_eval='test'))
  result = train.train_and_evaluate(config, str(workdir))
  # (Mock data serves 10 examples for any split; the folder tests pin slice sizes.)
  assert result['num_examples_train'] == result['num_examples'] == 10
  assert result['accuracy_train'] == result['accuracy']
  metadata = json.loads((workdir / 'metadata.json').read_text())
  assert metadata['accuracy_val'] == result['accuracy_val'] and metadata['batch'] == 4
  logged = [json.loads(line) for line in (workdir / 'metrics.jsonl').open()]
  assert logged[-1]['accuracy_val'] == result['accuracy_val']
  assert logged[-1]['accuracy_train'] == result['accuracy_train']
