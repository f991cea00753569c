"""Distillation: the losses against their definitions, inside the train step, and exact resume."""

import os
import signal
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from npz_fixtures import perturb
from test_train import final_params, make_config
from vit_jax import checkpoint
from vit_jax.training import distill
from vit_jax.training import losses
from vit_jax import models
from vit_jax.training import optim
from vit_jax.training import parallel
from vit_jax.training import settings
from vit_jax import train
from vit_jax.weights import npz_format

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def numpy_loss(logits, labels, teacher_logits, kind, alpha=0.5, tau=1.):
  """The definitions written out: DeiT hard distillation, and soft with tau² · KL."""
  true = -(labels * _log_softmax(logits)).sum(-1)
  if kind == 'hard':
    teacher_labels = np.eye(logits.shape[-1])[teacher_logits.argmax(-1)]
    return (1 - alpha) * true + alpha * -(teacher_labels * _log_softmax(logits)).sum(-1)
  p_t, log_p_t = np.exp(_log_softmax(teacher_logits / tau)), _log_softmax(teacher_logits / tau)
  kl = (p_t * (log_p_t - _log_softmax(logits / tau))).sum(-1)
  return (1 - alpha) * true + alpha * tau**2 * kl


def fixed_batch(n=8, classes=4, seed=0):
  rng = np.random.default_rng(seed)
  logits = rng.normal(0, 3, (n, classes)).astype(np.float32)
  teacher = rng.normal(0, 3, (n, classes)).astype(np.float32)
  labels = np.eye(classes, dtype=np.float32)[rng.integers(0, classes, n)]
  return logits, labels, teacher


@pytest.mark.parametrize('kind,alpha,tau', [('hard', 0.5, 1.), ('hard', 0.2, 1.),
                                            ('soft', 0.5, 1.), ('soft', 0.7, 3.)])
def test_loss_equals_its_definition(kind, alpha, tau):
  logits, labels, teacher = fixed_batch()
  config = make_config(distill=dict(kind=kind, alpha=alpha, temperature=tau))
  true = losses.compute_loss(jnp.asarray(logits), jnp.asarray(labels))
  got = distill.distill_loss(settings.distill(config), jnp.asarray(logits), jnp.asarray(teacher),
                             true)
  np.testing.assert_allclose(got, numpy_loss(logits, labels, teacher, kind, alpha, tau),
                             rtol=1e-5, atol=1e-6)


def _student_and_teacher(config):
  """The student of `config` and a 'testing' teacher (4 classes), both with perturbed random
  weights (so that logits are far from uniform), and a batch of 8 images with one-hot labels."""
  student = models.get_model(config.model, num_classes=4)
  teacher_model = models.get_model('testing', num_classes=4)
  x = np.random.default_rng(0).uniform(-1, 1, (8, 32, 32, 3)).astype(np.float32)
  labels = np.eye(4, dtype=np.float32)[np.random.default_rng(1).integers(0, 4, 8)]
  init = lambda m, seed: perturb(m.init(jax.random.key(seed), x[:1], train=False)['params'],  # noqa: E731
                                 seed, 0.5)
  return student, teacher_model, x, labels, init(student, 0), init(teacher_model, 1)


def _one_step(config, student, params, teacher_model, teacher_params, x, labels):
  """The metrics of one distilled train step of `student` from `params` (the trainer's own step
  function, on this host's mesh)."""
  mesh = parallel.make_mesh()
  tx = optim.make_optimizer(settings.optimizer(config), optim.learning_rate_schedule(
      total_steps=10, base_lr=0.1, decay_type='cosine', warmup_steps=1))
  teacher = distill.Teacher(teacher_model, parallel.put_replicated(teacher_params, mesh))
  step = train.make_train_step(student, tx, settings.read(config), mesh, teacher=teacher)
  state = {'params': parallel.put_replicated(params, mesh), 'opt_state': tx.init(params),
           'step': jnp.zeros((), jnp.int32), 'rng': jax.random.key_data(jax.random.key(0))}
  _, metrics = step(state, parallel.put_batch({'image': x, 'label': labels}, mesh))
  return metrics


def test_hard_loss_with_a_teacher_that_agrees_is_the_true_loss():
  logits, labels, _ = fixed_batch()
  config = make_config()
  true = losses.compute_loss(jnp.asarray(logits), jnp.asarray(labels))
  np.testing.assert_allclose(distill.distill_loss(settings.distill(config), jnp.asarray(logits),
                                                  jnp.asarray(labels * 5.), true), true,
                             rtol=1e-6)


@pytest.mark.parametrize('kind,accum_steps', [('hard', 1), ('soft', 2)])
def test_train_step_loss_runs_the_teacher_on_the_batch(kind, accum_steps):
  """The step's reported loss = the definition on the student's and the teacher's logits."""
  config = make_config(accum_steps=accum_steps, distill=dict(kind=kind, temperature=2.))
  student, teacher_model, x, labels, params, teacher_params = _student_and_teacher(config)
  metrics = _one_step(config, student, params, teacher_model, teacher_params, x, labels)
  logits = np.asarray(student.apply({'params': params}, x, train=False))  # No dropout here.
  t_logits = np.asarray(teacher_model.apply({'params': teacher_params}, x, train=False))
  want = numpy_loss(logits, labels, t_logits, kind, tau=2.).mean()
  np.testing.assert_allclose(float(metrics['loss']), want, rtol=2e-5)


def numpy_token_loss(cls_logits, dist_logits, labels, teacher_logits, kind, alpha=0.5, tau=1.):
  """DeiT with a distillation token: class head on the labels, distillation head on the teacher."""
  true = -(labels * _log_softmax(cls_logits)).sum(-1)
  return (1 - alpha) * true + alpha * numpy_loss(dist_logits, labels, teacher_logits, kind, 1., tau)


@pytest.mark.parametrize('kind', ['hard', 'soft'])
def test_distilled_student_trains_its_token_head_on_the_teacher(kind):
  """distilled=True: the loss routes the teacher to head_dist and the labels to head."""
  config = make_config(distill=dict(kind=kind, temperature=2., alpha=0.3))
  config.model.distilled = True
  student, teacher_model, x, labels, params, teacher_params = _student_and_teacher(config)
  assert 'head_dist' in params and 'dist' in params
  cls_logits, dist_logits = map(np.asarray, distill.head_logits(student, params, x,
                                                                jax.random.key(0)))
  assert np.abs(cls_logits - dist_logits).max() > 1e-3  # Two different heads.
  np.testing.assert_allclose(student.apply({'params': params}, x, train=False),
                             (cls_logits + dist_logits) / 2, rtol=1e-5, atol=1e-6)
  metrics = _one_step(config, student, params, teacher_model, teacher_params, x, labels)
  t_logits = np.asarray(teacher_model.apply({'params': teacher_params}, x, train=False))
  want = numpy_token_loss(cls_logits, dist_logits, labels, t_logits, kind, 0.3, 2.).mean()
  np.testing.assert_allclose(float(metrics['loss']), want, rtol=2e-5)
  mean_head = numpy_loss((cls_logits + dist_logits) / 2, labels, t_logits, kind, 0.3, 2.).mean()
  assert abs(mean_head - want) > 1e-3  # The class-token route would give another loss.


def write_teacher(path, num_classes=10):
  model = models.get_model('testing', num_classes=num_classes)
  params = model.init(jax.random.key(3), jnp.zeros((1, 32, 32, 3)), train=False)['params']
  return checkpoint.save(perturb(params, 3, 0.5), str(path))


RUN = textwrap.dedent('''
    import os, signal, sys
    import jax
    jax.config.update('jax_num_cpu_devices', 4)
    import tensorflow_datasets as tfds
    sys.path.insert(0, {tests!r})
    from test_train import make_config
    from vit_jax import train
    config = make_config(total_steps=6, checkpoint_every=2, eval_every=0,
                         distill=dict(teacher_path={teacher!r}, teacher_model='testing',
                                      kind={kind!r}))
    real = train.make_train_step
    def factory(*args, **kwargs):
      step_fn = real(*args, **kwargs)
      def wrapped(state, batch):
        if {kill} and int(state['step']) == 5:  # After the saves of steps 2 and 4.
          os.kill(os.getpid(), signal.SIGKILL)
        return step_fn(state, batch)
      return wrapped
    train.make_train_step = factory
    with tfds.testing.mock_data(num_examples=10):
      train.train_and_evaluate(config, {workdir!r})
''')


def run_distilled(workdir, teacher, kind, kill):
  env = dict(os.environ, JAX_PLATFORMS='cpu', JAX_DISABLE_MOST_OPTIMIZATIONS='1',
             PYTHONPATH=ROOT)
  script = RUN.format(tests=os.path.join(ROOT, 'tests'), teacher=teacher, kind=kind,
                      kill=kill, workdir=workdir)
  return subprocess.run([sys.executable, '-c', script], env=env, capture_output=True,
                        text=True, timeout=600)


@pytest.mark.slow
def test_distilled_run_resumes_bit_exactly_after_sigkill(tmp_path, kind='hard'):
  teacher = write_teacher(tmp_path / 'teacher.npz')
  straight, killed = str(tmp_path / 'straight'), str(tmp_path / 'killed')
  proc = run_distilled(killed, teacher, kind, kill=True)
  assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
  assert not os.path.exists(os.path.join(killed, 'params.npz'))
  # Step 2 is final (a save waits for the previous one); step 4's async save may be cut short.
  assert '2' in os.listdir(os.path.join(killed, 'train_state'))
  for workdir in (killed, straight):  # Resume the killed run; run another one straight through.
    proc = run_distilled(workdir, teacher, kind, kill=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
  resumed, reference = npz_format.flatten(final_params(killed)), npz_format.flatten(
      final_params(straight))
  assert resumed.keys() == reference.keys()
  for key in reference:
    np.testing.assert_array_equal(resumed[key], reference[key], err_msg=key)


def test_distillation_config_errors_are_one_line(tmp_path, mock_cifar10):  # noqa: F811
  teacher = write_teacher(tmp_path / 'teacher.npz', num_classes=7)
  cases = [
      (dict(teacher_path=teacher, teacher_model=''), 'distill.teacher_model is empty and .*'
       'teacher.npz does not say'),
      (dict(teacher_path=teacher, teacher_model='testing', kind='medium'),
       "Unknown distill.kind='medium'"),
      (dict(teacher_path=teacher, teacher_model='testing', alpha=1.5), 'must be in'),
      (dict(teacher_path=str(tmp_path / 'missing.npz'), teacher_model='testing'),
       'Missing inputs'),
      (dict(teacher_path=teacher, teacher_model='testing'), 'has 7 classes and the dataset 10'),
  ]
  for fields, message in cases:
    with pytest.raises(ValueError, match=message):
      train.train_and_evaluate(make_config(distill=fields), str(tmp_path / 'run'))
