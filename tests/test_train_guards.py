"""What a run trains on, logs, saves and exports is what the user meant (issue 28, items 3, 4, 9).

Non-finite updates never reach a checkpoint or the export; the weight average forgets its start;
Mixup mixes the global batch; the logged lr, progress loss and eval loss are the step's; AdamW
decays kernels only.
"""

import json
import os
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import forked
from vit_jax.weights import resume
from vit_jax import config_lib
from vit_jax import input_pipeline
from vit_jax.training import settings
from vit_jax import models
from vit_jax.training import losses
from vit_jax.training import optim
from vit_jax.training import parallel
from vit_jax import train
from vit_jax.weights import store
from vit_jax.weights import npz_format
from test_distributed import fixed_batch, run_steps, step_config, write_image_dataset
from test_train import final_params, fixed_batch_step, make_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))



def inf_gradient_at(steps):
  """An optax stage that makes the gradient infinite at the given (1-based) steps.

  Placed before the clipping, as a real overflow in the backward pass would be: the loss of that
  step stays finite.
  """

  def update(grads, count, params=None):
    del params
    factor = jnp.where(jnp.isin(count + 1, jnp.asarray(steps)), jnp.inf, 1.)
    return jax.tree.map(lambda g: g * factor, grads), count + 1

  return optax.GradientTransformation(lambda params: jnp.zeros((), jnp.int32), update)


def poisoned_optimizer(steps):
  real = optim.make_optimizer
  return mock.patch.object(
      optim, 'make_optimizer',
      lambda optimizer, schedule: optax.chain(inf_gradient_at(steps), real(optimizer, schedule)))


def saved_steps(workdir):
  return sorted(int(s) for s in os.listdir(os.path.join(workdir, 'train_state')))


def assert_checkpoints_finite(workdir, config):
  manager = resume.make_checkpoint_manager(workdir, config.keep_checkpoints)
  for step in manager.all_steps():
    state = manager.restore(step)
    for leaf in jax.tree.leaves(state['params']):
      assert np.all(np.isfinite(leaf)), f'checkpoint {step} holds non-finite params'


def test_inf_gradient_with_finite_loss_is_not_applied():
  config = make_config(optim='sgd', grad_norm_clip=1.)
  real = optim.make_optimizer
  with mock.patch.object(optim, 'make_optimizer', lambda c, s: optax.chain(
      inf_gradient_at([2]), real(c, s))):
    step, state, batch = fixed_batch_step(config, 'cosine', total_steps=10, warmup_steps=0)
  state, metrics = step(state, batch)
  assert not bool(metrics['nonfinite'])
  before = jax.device_get(state)
  state, metrics = step(state, batch)
  assert np.isfinite(float(metrics['loss'])) and bool(metrics['nonfinite'])
  after = jax.device_get(state)  # Unchanged: params, optimizer state and step counter.
  for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after)):
    np.testing.assert_array_equal(a, b)


def test_inf_gradient_at_a_checkpoint_step_is_never_saved(tmp_path, mock_cifar10):
  config = make_config(total_steps=6, checkpoint_every=2, progress_every=3, eval_every=0,
                       ema_decay=0.5)
  workdir = str(tmp_path / 'run')
  with poisoned_optimizer([4]), pytest.raises(train.NonFiniteLossError) as error:
    train.train_and_evaluate(config, workdir)
  message = str(error.value)
  assert 'between steps 4 and 4' in message and 'last good checkpoint (step 2)' in message
  assert saved_steps(workdir) == [2]
  with poisoned_optimizer([4]):
    assert_checkpoints_finite(workdir, config)
  assert not os.path.exists(os.path.join(workdir, 'params.npz'))


def test_inf_gradient_at_the_last_step_exports_nothing(tmp_path, mock_cifar10):
  config = make_config(total_steps=4, checkpoint_every=0, progress_every=10, eval_every=0)
  workdir = str(tmp_path / 'run')
  with poisoned_optimizer([4]), pytest.raises(
      train.NonFiniteLossError, match='between steps 1 and 4 .*no checkpoint was saved'):
    train.train_and_evaluate(config, workdir)
  assert not os.path.exists(os.path.join(workdir, 'params.npz'))
  assert not os.path.exists(os.path.join(workdir, store.METADATA_FILE))
  assert not os.listdir(os.path.join(workdir, 'train_state'))


HOOKED_MAIN = '''
import sys
import tensorflow_datasets as tfds
sys.path.insert(0, {tests!r})
import test_train_guards
with tfds.testing.mock_data(num_examples=10), test_train_guards.poisoned_optimizer([2]):
  from vit_jax import main
  main.run()
'''

CONFIG = '''
import sys
sys.path.insert(0, {tests!r})
import test_train

def get_config():
  return test_train.make_config(total_steps=2, checkpoint_every=2, eval_every=0).lock()
'''


def test_cli_exits_1_with_one_line_on_a_non_finite_step(tmp_path):
  tests = os.path.join(ROOT, 'tests')
  (tmp_path / 'config.py').write_text(CONFIG.format(tests=tests))
  workdir = tmp_path / 'run'
  proc = forked.run(
      ['-c', HOOKED_MAIN.format(tests=tests), f'--config={tmp_path}/config.py',
       f'--workdir={workdir}'], cwd=ROOT, timeout=300, env=dict(os.environ, JAX_PLATFORMS='cpu'))
  assert proc.returncode == 1, proc.stderr[-3000:]
  errors = [line for line in proc.stderr.splitlines() if line.startswith('error:')]
  assert len(errors) == 1 and 'NaN/inf between steps 1 and 2' in errors[0], proc.stderr[-3000:]
  assert 'Traceback' not in proc.stderr and 'Done.' not in proc.stdout
  assert not os.path.exists(workdir / 'params.npz') and not os.listdir(workdir / 'train_state')


def test_weight_average_forgets_its_start():
  assert 0.9995 ** 500 > 0.77  # Without a warm-up: mostly the initial model.
  assert losses.ema_initial_weight(0.9995, 500) < 1e-15
  assert losses.ema_initial_weight(0.9, 1) == pytest.approx(0.1)  # min(0.9, 1/10).
  np.testing.assert_allclose(losses.ema_decay_at(0.999, jnp.array([0, 1, 10_000])),
                             [0.1, 2 / 11, 0.999], rtol=1e-6)


def test_ema_run_exports_an_average_of_the_trained_weights(tmp_path, mock_cifar10, caplog):
  config = make_config(total_steps=6, eval_every=3, ema_decay=0.9995)
  workdir = str(tmp_path / 'run')
  with caplog.at_level('INFO'):
    result = train.train_and_evaluate(config, workdir)
  manager = resume.make_checkpoint_manager(workdir, config.keep_checkpoints)
  raw = jax.device_get(manager.restore(6)['params'])
  ema = final_params(workdir)
  # The head starts at zero: an average that kept 0.9995^6 = 99.7% of it would be ~0.
  raw_norm, ema_norm = (np.linalg.norm(p['head']['kernel']) for p in (raw, ema))
  assert raw_norm > 0 and ema_norm > 0.3 * raw_norm, (ema_norm, raw_norm)
  with open(os.path.join(workdir, store.METADATA_FILE)) as f:
    metadata = json.load(f)
  assert metadata['weights'] == 'ema' and metadata['ema_decay'] == 0.9995
  assert metadata['accuracy_raw'] == result['accuracy_raw']
  assert 'Exported the ema weights (weight average)' in caplog.text


def test_ema_warns_when_the_average_cannot_have_left_its_start(tmp_path, mock_cifar10, caplog):
  with caplog.at_level('INFO'):
    train.train_and_evaluate(make_config(total_steps=1, eval_every=0, ema_decay=0.9),
                             str(tmp_path / 'run'))
  assert 'keeps 10% of the initial weights after 1 steps' in caplog.text
  with open(os.path.join(tmp_path, 'run', store.METADATA_FILE)) as f:
    assert json.load(f)['weights'] == 'ema'
  train.train_and_evaluate(make_config(total_steps=1, eval_every=0), str(tmp_path / 'plain'))
  with open(os.path.join(tmp_path, 'plain', store.METADATA_FILE)) as f:
    assert json.load(f)['weights'] == 'raw'


def stream_config(dataset, **overrides):
  config = make_config(dataset=dataset, data_sharding='stream', batch=8, shuffle_buffer=16,
                       **overrides)
  config.pp.update(dict(train='train', test='test', crop=16))
  return config


def test_mixup_leaves_the_per_process_streams_a_split_of_the_global_one(tmp_path):
  config = stream_config(write_image_dataset(str(tmp_path / 'data')), mixup=0.5)
  single = next(input_pipeline.get_train_data(settings.data(config)))
  parts = []
  for index in range(2):
    with mock.patch.object(jax, 'process_count', return_value=2), \
         mock.patch.object(jax, 'process_index', return_value=index):
      parts.append(next(input_pipeline.get_train_data(settings.data(config))))
  for key in ('image', 'label'):
    np.testing.assert_array_equal(np.concatenate([p[key] for p in parts]), single[key])


def test_mixup_pairs_neighbours_across_devices():
  batch = fixed_batch(n=8)
  rng = jax.random.key(3)
  expected = None
  for devices in (1, 4):
    mesh = parallel.make_mesh(jax.devices()[:devices])
    mixed = jax.jit(lambda x, y: losses.mixup(x, y, 0.5, rng))(
        *(parallel.put_batch(batch, mesh)[k] for k in ('image', 'label')))
    mixed = [np.asarray(m) for m in mixed]
    if expected is None:
      expected = mixed
    for a, b in zip(mixed, expected):
      np.testing.assert_allclose(a, b, rtol=1e-6)
  ratio = float(jax.random.beta(rng, 0.5, 0.5))
  # Example 0 (first device) is mixed with example 7 (last device).
  np.testing.assert_allclose(expected[1][0], ratio * batch['label'][0]
                             + (1 - ratio) * batch['label'][7], rtol=1e-5)


@pytest.mark.parametrize('accum_steps', [1, 2])
def test_mixup_step_is_the_same_on_1_and_4_devices(accum_steps):
  config = step_config(mixup=0.5, accum_steps=accum_steps)
  batch = fixed_batch()
  params_1, _ = run_steps(1, config, batch)
  params_4, _ = run_steps(4, config, batch)
  for key, value in npz_format.flatten(params_1).items():
    np.testing.assert_allclose(npz_format.flatten(params_4)[key], value, atol=1e-6, err_msg=key)
  unmixed, _ = run_steps(1, step_config(accum_steps=accum_steps), batch)
  assert not np.allclose(unmixed['head']['kernel'], params_1['head']['kernel'])
  if accum_steps == 2:  # Accumulation splits the mixed batch: the same step as without it.
    whole, _ = run_steps(1, step_config(mixup=0.5), batch)
    for key, value in npz_format.flatten(whole).items():
      np.testing.assert_allclose(npz_format.flatten(params_1)[key], value, atol=1e-5, err_msg=key)


def read_metrics(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f]


def test_logged_lr_is_the_one_the_step_used(tmp_path, mock_cifar10):
  config = make_config(total_steps=4, warmup_steps=2, progress_every=1, eval_every=0)
  workdir = str(tmp_path / 'run')
  train.train_and_evaluate(config, workdir)
  lrs = {r['step']: r['lr'] for r in read_metrics(workdir) if 'lr' in r}
  schedule = optim.learning_rate_schedule(total_steps=4, base_lr=config.base_lr,
                                          decay_type='cosine', warmup_steps=2)
  assert lrs == pytest.approx({s: float(schedule(s - 1)) for s in range(1, 5)})
  assert lrs[1] == 0.
  # And step 1 does use lr 0: SGD leaves the weights where they were.
  step, state, batch = fixed_batch_step(make_config(), 'cosine', total_steps=4, warmup_steps=2)
  before = jax.device_get(state['params'])
  state, _ = step(state, batch)
  for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(jax.device_get(state['params']))):
    np.testing.assert_array_equal(a, b)


def test_progress_loss_is_the_mean_over_the_interval(tmp_path, mock_cifar10):
  every_step, every_3 = str(tmp_path / 'each'), str(tmp_path / 'three')
  for workdir, every in ((every_step, 1), (every_3, 3)):
    train.train_and_evaluate(make_config(total_steps=3, progress_every=every, eval_every=0,
                                         warmup_steps=0), workdir)
  losses = [r['train_loss'] for r in read_metrics(every_step) if 'train_loss' in r]
  assert len(losses) == 3 and len(set(losses)) == 3
  (logged,) = [r['train_loss'] for r in read_metrics(every_3) if 'train_loss' in r]
  assert logged == pytest.approx(np.mean(losses), rel=1e-6)
  assert logged != pytest.approx(losses[-1], rel=1e-3)


def test_eval_loss_is_the_training_loss_kind(tmp_path, mock_cifar10):
  config = make_config(total_steps=2, eval_every=0, loss='sigmoid_xent')
  workdir = str(tmp_path / 'run')
  result = train.train_and_evaluate(config, workdir)
  model = models.get_model(config.model, num_classes=10)
  params = final_params(workdir)
  total, count = 0., 0.
  for batch in input_pipeline.get_eval_data(settings.data(config)).batches():
    logits = model.apply({'params': params}, batch['image'], train=False)
    losses = optax.sigmoid_binary_cross_entropy(logits, batch['label']).sum(-1)
    total += float(jnp.sum(losses * batch['mask']))
    count += float(batch['mask'].sum())
  assert result['loss'] == pytest.approx(total / count, rel=1e-5)


@pytest.mark.parametrize('on,decayed', [
    ('kernels', {'embedding/kernel', 'head/kernel'}),
    ('all', {'embedding/kernel', 'head/kernel', 'embedding/bias', 'cls', 'head/bias',
             'Transformer/posembed_input/pos_embedding', 'Transformer/encoder_norm/scale'}),
])
def test_adamw_weight_decay_mask(on, decayed):
  config = make_config(optim='adamw', weight_decay=0.5, weight_decay_on=on)
  model = models.get_model(config.model, num_classes=4)
  params = model.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)), train=False)['params']
  params = jax.tree.map(lambda x: x + 0.1, params)  # Nothing zero: decay is visible everywhere.
  tx = optim.make_optimizer(settings.optimizer(config), optax.constant_schedule(1.))
  zeros = jax.tree.map(jnp.zeros_like, params)  # Adam's own update is 0: only the decay moves.
  updates, _ = tx.update(zeros, tx.init(params), params)
  moved = {k for k, v in npz_format.flatten(jax.device_get(updates)).items() if np.any(v)}
  assert decayed <= moved
  if on == 'kernels':
    assert moved and all(k.endswith('kernel') for k in moved), moved


def decayed_params(model, image_size):
  """Flat names of the params one AdamW step moves when Adam's own update is zero."""
  config = make_config(optim='adamw', weight_decay=0.5, weight_decay_on='kernels')
  params = model.init(jax.random.key(0), jnp.zeros((1, image_size, image_size, 3)),
                      train=False)['params']
  params = jax.tree.map(lambda x: x + 0.1, params)  # Nothing zero: decay is visible everywhere.
  tx = optim.make_optimizer(settings.optimizer(config), optax.constant_schedule(1.))
  updates, _ = tx.update(jax.tree.map(jnp.zeros_like, params), tx.init(params), params)
  flat = npz_format.flatten(jax.device_get(updates))
  return {k for k, v in flat.items() if np.any(v)}, set(flat)


@pytest.mark.parametrize('name,overrides,image_size,kept', [
    # DINOv2-style (LayerScale, registers) with big_vision's MAP head: as timm's no_weight_decay.
    ('testing', dict(layer_scale=1e-5, num_registers=2, classifier='map'), 32,
     ('ls1', 'ls2', 'reg', 'probe', 'pos_embedding', 'scale', 'bias')),
    ('Swin-testing', {}, 32, ('relative_position_bias_table', 'scale', 'bias')),
])
def test_adamw_decays_only_conv_and_dense_kernels(name, overrides, image_size, kept):
  model = config_lib.with_model(config_lib.get_config(), name).model
  model.update(overrides)
  decayed, names = decayed_params(models.get_model(model, num_classes=4), image_size)
  assert decayed == {k for k in names if k.endswith('/kernel')}, decayed ^ {
      k for k in names if k.endswith('/kernel')}
  for part in kept:  # Each kind the model has is there and left alone.
    present = {k for k in names if k.split('/')[-1].startswith(part)}
    assert present and not present & decayed, (part, present & decayed)


def animals_checkpoint(tmp_path, class_names, order=(0, 1, 2)):
  """A `testing` model's params (32px, 3 outputs) saved with its outputs in `order` and, when
  `class_names` is given, a `<name>.json` that names them; returns (path, unpermuted params)."""
  from vit_jax import checkpoint
  model = models.get_model('testing', num_classes=3)
  params = jax.device_get(model.init(jax.random.key(5), jnp.zeros((1, 32, 32, 3)),
                                     train=False)['params'])
  params['head'] = {'kernel': np.arange(30, dtype=np.float32).reshape(10, 3),
                    'bias': np.array([7., 8., 9.], np.float32)}
  order = list(order)
  saved = dict(params, head={'kernel': params['head']['kernel'][:, order],
                             'bias': params['head']['bias'][order]})
  path = checkpoint.save(saved, str(tmp_path / 'animals.npz'))
  if class_names is not None:
    with open(tmp_path / 'animals.json', 'w') as f:
      json.dump({'class_names': list(class_names)}, f)
  return path, params


def keep_head_config(tmp_path, checkpoint_path):
  from test_run_record import folder_config, write_animals  # cat, dog, eel
  return folder_config(write_animals(str(tmp_path / 'data')), 2, keep_head=True,
                       pretrained_path=checkpoint_path)


def test_keep_head_puts_the_heads_outputs_in_the_datasets_class_order(tmp_path):
  """Issue 62.1: a kept head is matched by class name, not by position."""
  from vit_jax.training import state as state_lib
  path, params = animals_checkpoint(tmp_path, ('eel', 'cat', 'dog'), order=(2, 0, 1))
  trainer = state_lib.build_trainer(settings.read(keep_head_config(tmp_path, path)))
  head = jax.device_get(state_lib.init_state(trainer)['params']['head'])
  np.testing.assert_array_equal(head['kernel'], params['head']['kernel'])
  np.testing.assert_array_equal(head['bias'], params['head']['bias'])


def test_keep_head_on_other_classes_is_refused_in_one_line(tmp_path):
  """Issue 62.1: [cat, dog, fox] kept onto [cat, dog, eel] trained 'fox' as 'eel', silently."""
  from vit_jax.training import state as state_lib
  path, _ = animals_checkpoint(tmp_path, ('cat', 'dog', 'fox'))
  trainer = state_lib.build_trainer(settings.read(keep_head_config(tmp_path, path)))
  with pytest.raises(ValueError) as error:
    state_lib.init_state(trainer)
  message = str(error.value)
  assert '\n' not in message
  assert "['fox']" in message and "['eel']" in message and 'keep_head=False' in message


def test_keep_head_from_a_file_without_class_names_says_so(tmp_path, caplog):
  from vit_jax.training import state as state_lib
  path, params = animals_checkpoint(tmp_path, None)
  trainer = state_lib.build_trainer(settings.read(keep_head_config(tmp_path, path)))
  with caplog.at_level('WARNING'):
    head = jax.device_get(state_lib.init_state(trainer)['params']['head'])
  np.testing.assert_array_equal(head['kernel'], params['head']['kernel'])
  assert 'declares no class names' in caplog.text and "['cat', 'dog', 'eel']" in caplog.text


def test_a_dataset_of_one_class_is_refused_before_training(tmp_path):
  """Issue 62.4: one class folder trained to loss 0 and test accuracy 1.0, exit 0."""
  from test_run_record import folder_config
  data = write_image_dataset(str(tmp_path / 'data'), classes=1)
  workdir = str(tmp_path / 'run')
  with pytest.raises(ValueError, match=r"has 1 class \('class0'\).*at least 2"):
    train.train_and_evaluate(folder_config(data, 2), workdir)
  assert not store.has_saved_state(workdir)
  assert not os.path.exists(os.path.join(workdir, 'metrics.jsonl'))
