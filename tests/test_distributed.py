"""Scale-out: 1, 2 and 4 devices give the same step; 2 processes equal 1; resume across both.

conftest.py forces 4 CPU devices for the whole test session.
"""

import concurrent.futures
import glob
import os
import re
import signal
import socket
import sys
import time
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

import forked
from test_damaged_checkpoints import truncate
from vit_jax import checkpoint
from vit_jax import config_lib
from vit_jax import main
from vit_jax import models
from vit_jax.training import optim
from vit_jax.training import parallel
from vit_jax.training import settings
from vit_jax import train
from vit_jax.weights import npz_format

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def step_config(**overrides):
  config = config_lib.with_model(config_lib.get_config(), 'testing')
  config.model.transformer.dropout_rate = 0.
  config.update(dict(dict(accum_steps=1, optim_dtype='float32'), **overrides))
  return config


def fixed_batch(n=8, side=32, classes=10, seed=0):
  rng = np.random.default_rng(seed)
  return {'image': rng.uniform(-1, 1, (n, side, side, 3)).astype(np.float32),
          'label': np.eye(classes, dtype=np.float32)[rng.integers(0, classes, n)]}


def run_steps(num_devices, config, batch, steps=2):
  """`steps` train steps on a mesh of the first `num_devices` devices; returns host params."""
  mesh = parallel.make_mesh(jax.devices()[:num_devices])
  model = models.get_model(config.model, num_classes=10)
  tx = optim.make_optimizer(settings.optimizer(config), optim.learning_rate_schedule(
      total_steps=10, base_lr=0.1, decay_type='cosine', warmup_steps=1))
  params = model.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)), train=False)['params']
  params = jax.tree.map(lambda x: x + 0.02, params)  # Non-zero head: all grads non-trivial.
  state = parallel.put_replicated({'params': params, 'opt_state': tx.init(params),
                                   'step': jnp.zeros((), jnp.int32),
                                   'rng': jax.random.key_data(jax.random.key(0))}, mesh)
  train_step = train.make_train_step(model, tx, settings.read(config), mesh)
  for _ in range(steps):
    state, _ = train_step(state, parallel.put_batch(batch, mesh))
  eval_step = train.make_eval_step(model, mesh)
  sums = eval_step(state['params'], parallel.put_batch(
      dict(batch, mask=np.ones(len(batch['label']), np.float32)), mesh))
  return parallel.to_host(state['params']), parallel.to_host(sums)


def test_four_cpu_devices_are_forced():
  assert jax.device_count() == 4


@pytest.mark.parametrize('accum_steps', [1, 2])
def test_same_step_on_1_2_and_4_devices(accum_steps):
  config, batch = step_config(accum_steps=accum_steps), fixed_batch()
  reference, ref_sums = run_steps(1, config, batch)
  for devices in (2, 4):
    params, sums = run_steps(devices, config, batch)
    for a, b in zip(jax.tree.leaves(reference), jax.tree.leaves(params)):
      np.testing.assert_allclose(a, b, atol=2e-6, rtol=1e-5)
    assert float(sums['correct']) == float(ref_sums['correct'])
    np.testing.assert_allclose(sums['loss'], ref_sums['loss'], rtol=1e-5)


def test_batch_not_divisible_by_devices_is_a_clear_error():
  mesh = parallel.make_mesh()
  with pytest.raises(ValueError, match=r'batch=6 is not divisible by 4 devices'):
    parallel.check_batch_size(6, mesh)
  with pytest.raises(ValueError, match=r'choose a multiple of 8'):
    parallel.check_batch_size(12, mesh, accum_steps=2)


def write_image_dataset(root, classes=3, train_per_class=8, test_per_class=3):
  rng = np.random.default_rng(0)
  for split, count in (('train', train_per_class), ('test', test_per_class)):
    for c in range(classes):
      folder = os.path.join(root, split, f'class{c}')
      os.makedirs(folder, exist_ok=True)
      for i in range(count):
        # Class-dependent mean brightness, so the model can learn something.
        pixels = np.clip(rng.normal(60 + 70 * c, 30, (16, 16, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(os.path.join(folder, f'{i}.png'))
  return root


CONFIG_FILE = '''
from vit_jax import config_lib

def get_config():
  config = config_lib.with_model(config_lib.get_config(), 'testing')
  config.model.transformer.dropout_rate = 0.
  config.dataset = {dataset!r}
  config.pp.update(dict(train='train', test='test', crop=32, train_aug='flip'))
  config.update(dict(pretrained_dir='', total_steps={steps}, batch=8, batch_eval=4,
                     accum_steps=1, warmup_steps=1, base_lr=0.05, optim_dtype='float32',
                     shuffle_buffer=32, progress_every=1, eval_every=4, checkpoint_every=2,
                     prefetch=1, data_sharding='stream', mixup=0.5))
  return config.lock()
'''


def free_port():
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def launch(config_path, workdir, *, process_id=None, num_processes=None, port=None,
           devices=2, args=(), cwd=ROOT, python=('-m', 'vit_jax.main')):
  """`python -m vit_jax.main` in `cwd`; `workdir=None` leaves the run directory to the command.
  `python=('-c', CODE)` runs CODE instead, with the same arguments (CODE calls `main.run()`)."""
  env = dict(os.environ, XLA_FLAGS=forked.xla_flags(devices),
             JAX_PLATFORMS='cpu')
  env.pop('JAX_NUM_CPU_DEVICES', None)
  command = [sys.executable, *python, f'--config={config_path}']
  command += [f'--workdir={workdir}'] if workdir else []
  command += list(args)
  if process_id is not None:
    command += [f'--coordinator_address=127.0.0.1:{port}', f'--num_processes={num_processes}',
                f'--process_id={process_id}']
  return forked.popen(command[1:], cwd=cwd, env=env, merge_stderr=True)


def finish(procs, timeout=300):
  outputs = [p.communicate(timeout=timeout)[0] for p in procs]
  for p, out in zip(procs, outputs):
    assert p.returncode == 0, out[-3000:]
  return outputs


def launch_pair(config_path, workdir, args=(), cwd=ROOT):
  port = free_port()
  return [launch(config_path, workdir, process_id=i, num_processes=2, port=port, args=args,
                 cwd=cwd)
          for i in range(2)]


def wait_for_checkpoint(procs, workdir, step=2):
  deadline = time.time() + 240
  while not os.path.isdir(os.path.join(workdir, 'train_state', str(step))):
    assert time.time() < deadline and all(p.poll() is None for p in procs), 'no checkpoint'
    time.sleep(0.2)


def seconds_from_checkpoint_to_exit(procs, checkpoints, timeout=120):
  """Called right after a SIGTERM: seconds from the stop's checkpoint (the first step directory
  of `checkpoints` that is not there yet) appearing to each process's exit."""
  def steps():
    return {name for name in os.listdir(checkpoints) if name.isdigit()}
  before, saved, ended = steps(), None, [None] * len(procs)
  deadline = time.time() + timeout
  while None in ended:
    assert time.time() < deadline, 'did not exit'
    if saved is None and steps() - before:
      saved = time.time()
    ended = [end or (time.time() if p.poll() is not None else None)
             for p, end in zip(procs, ended)]
    time.sleep(0.05)
  assert saved is not None, 'no checkpoint saved after the SIGTERM'
  return [end - saved for end in ended]


@pytest.mark.slow
def test_two_processes_without_workdir_share_one_run_directory(tmp_path):
  """Each process derives the run directory from the command alone: both pick the same one."""
  dataset = write_image_dataset(str(tmp_path / 'data'), train_per_class=4, test_per_class=2)
  (tmp_path / 'config.py').write_text(CONFIG_FILE.format(dataset=dataset, steps=2))
  outputs = finish(launch_pair('config.py', None, cwd=tmp_path))
  runs = os.listdir(tmp_path / 'runs')
  assert len(runs) == 1 and runs[0].startswith('config-'), runs
  run_dir = tmp_path / 'runs' / runs[0]
  assert os.path.isfile(run_dir / 'params.npz')
  # Both processes wrote their orbax shards into the one directory (a restore needs both).
  assert os.path.isdir(run_dir / 'train_state' / '2')
  assert f'Run directory: runs/{runs[0]}' in outputs[0], outputs[0][-2000:]
  assert all(f'Workdir: runs/{runs[0]}' in out for out in outputs), outputs[1][-2000:]


@pytest.mark.slow
def test_two_processes_equal_one_after_sigterm_to_one_and_a_damaged_checkpoint(tmp_path):
  dataset = write_image_dataset(str(tmp_path / 'data'))
  config_path = tmp_path / 'config.py'
  config_path.write_text(CONFIG_FILE.format(dataset=dataset, steps=12))
  single_dir, multi_dir = str(tmp_path / 'single'), str(tmp_path / 'multi')

  # SIGTERM to process 1 only, once the first shared checkpoint exists: both stop at the same
  # step with a checkpoint, exit 143 (not 0: params.npz does not exist) and say how to continue.
  procs = launch_pair(config_path, multi_dir)
  wait_for_checkpoint(procs, multi_dir)
  procs[1].send_signal(signal.SIGTERM)
  to_exit = seconds_from_checkpoint_to_exit(procs, os.path.join(multi_dir, 'train_state'))
  first = [p.communicate(timeout=120)[0] for p in procs]
  assert [p.returncode for p in procs] == [main.EXIT_STOPPED] * 2, first[1][-3000:]
  # Both exit within 10 s of the checkpoint, inside a scheduler's grace period (issue 62: 58 s:
  # tf.data closing its pipeline, then the interpreter's teardown).
  assert max(to_exit) < 10, to_exit
  stops = [re.findall(r'^Stopped at step (\d+) by SIGTERM; checkpoint saved in \S+\. To '
                      r'continue: python -m vit_jax\.main .*', out, re.M) for out in first]
  assert [len(s) for s in stops] == [1, 1], first[0][-2000:]
  stopped = [int(s[0]) for s in stops]
  assert stopped[0] == stopped[1] > 2
  assert not os.path.exists(os.path.join(multi_dir, 'params.npz')), first[0][-2000:]

  # The newest checkpoint damaged: both processes agree to fall back to the same older one.
  checkpoints = os.path.join(multi_dir, 'train_state')
  steps = sorted(int(name) for name in os.listdir(checkpoints))
  assert steps[-1] == stopped[0]
  truncate(os.path.join(checkpoints, str(steps[-1])), '_sharding')
  outputs = finish(launch_pair(config_path, multi_dir))
  for out in outputs:
    assert f'train_state/{steps[-1]} cannot be read' in out, out[-3000:]
    assert f'Resuming from checkpoint at step {steps[-2]} ' in out, out[-3000:]

  finish([launch(config_path, single_dir, devices=4)])
  single = checkpoint.load(os.path.join(single_dir, 'params.npz'))
  multi = checkpoint.load(os.path.join(multi_dir, 'params.npz'))
  for key, value in npz_format.flatten(single).items():
    np.testing.assert_allclose(npz_format.flatten(multi)[key], value, atol=1e-5, err_msg=key)

  # Only process 0 wrote logs, metrics and the export (one events file per run of process 0).
  written = sorted(os.listdir(multi_dir))
  assert {'params.npz', 'metrics.jsonl', 'train.log', 'curves.png'} <= set(written)
  assert len(glob.glob(os.path.join(multi_dir, 'events.out.tfevents.*'))) == 2
  assert not any('.1' in name and 'log' in name for name in written)


@pytest.mark.slow
@pytest.mark.parametrize('killed', [1, 0])
def test_a_killed_process_ends_the_other_with_one_line(tmp_path, killed):
  """kill -9 of either process: the other prints the project's one line and exits 75. Process
  0 holds JAX's coordination service, and jaxlib aborts a process whose coordinator is gone
  (SIGABRT, a C++ stack trace, a thread dump) before the watchdog can speak: each process of a
  multi-process run trains in a child of the command's process (`training.supervisor`), which
  turns that abort into the same line (before: exit 134 within 0.7 s)."""
  dataset = write_image_dataset(str(tmp_path / 'data'))
  config_path = tmp_path / 'config.py'
  config_path.write_text(CONFIG_FILE.format(dataset=dataset, steps=10_000))
  workdir = str(tmp_path / 'multi')
  procs = launch_pair(config_path, workdir, args=['--peer_timeout=5'])
  wait_for_checkpoint(procs, workdir)
  procs[killed].kill()  # The command's process: its training child dies with it.
  survivor = 1 - killed
  start = time.time()
  out = procs[survivor].communicate(timeout=120)[0]
  seconds = time.time() - start
  assert procs[survivor].returncode == parallel.EXIT_PEER_LOST, out[-3000:]
  lines = [line for line in out.splitlines() if line.startswith('error:')]
  assert len(lines) == 1, out[-3000:]
  why = 'no heartbeat for 5 s' if killed else 'the coordinator stopped answering'
  assert lines[0].startswith(f'error: lost process {killed} of 2 ({why}'), lines[0]
  assert f'--process_id={survivor} --workdir={workdir}' in lines[0]
  for noise in ('Traceback', 'Check failure', 'Fatal Python error'):
    assert noise not in out, out[-3000:]
  # The watchdog's timeout, not JAX's abort 30 s later (measured: 5 + about 1 s). The clock
  # starts at the kill, but silence is counted from the peer's last beat seen, which came up to
  # one watchdog round (1 s, longer on a loaded machine: 4.35 s seen once in CI) before it.
  # A lost coordinator is seen at once.
  assert (5 - 3 if killed else 0) <= seconds < 5 + parallel.JAX_HEARTBEAT_MARGIN_S, seconds
  assert os.path.isdir(os.path.join(workdir, 'train_state', '2'))  # Kept for the rerun.


@pytest.mark.parametrize('peer_timeout', [5, 60, 600])
def test_jax_declares_a_silent_process_dead_only_after_the_watchdog(peer_timeout):
  """JAX can declare a killed process dead half its heartbeat timeout after the kill (it sends a
  heartbeat every half timeout: the next test), so half of it must come after the watchdog's
  verdict. Before: `peer_timeout + 30`, and JAX aborted a survivor 57 s after a kill, before
  the 60 s watchdog could print its line (issue 62)."""
  with mock.patch.object(jax.distributed, 'initialize') as initialize, \
      mock.patch.object(jax.config, 'update'):
    parallel.maybe_initialize_distributed('127.0.0.1:1', 2, 1, peer_timeout)
  heartbeat = initialize.call_args.kwargs['heartbeat_timeout_seconds']
  assert heartbeat / 2 >= peer_timeout + parallel.JAX_HEARTBEAT_MARGIN_S, heartbeat


HEARTBEAT_PROBE = '''
import os, sys, time, jax
address, process_id, timeout, ready = sys.argv[1:]
jax.distributed.initialize(coordinator_address=address, num_processes=2,
                           process_id=int(process_id), heartbeat_timeout_seconds=int(timeout))
open(ready, 'w').close()
time.sleep(600)
'''


@pytest.mark.slow
def test_jax_declares_a_killed_process_dead_no_sooner_than_half_its_timeout(tmp_path):
  """What `parallel.jax_heartbeat_timeout` relies on, measured on the installed jaxlib: a process
  killed just before its next heartbeat (half a timeout after it connected, when it sent one)
  is declared dead by JAX no sooner than half the timeout later (SIGABRT of the survivor)."""
  timeout, address = 8, f'127.0.0.1:{free_port()}'
  env = dict(os.environ, XLA_FLAGS=forked.xla_flags(1),
             JAX_PLATFORMS='cpu')
  env.pop('JAX_NUM_CPU_DEVICES', None)  # As `launch`: the same forked server.
  ready = [str(tmp_path / f'ready{i}') for i in range(2)]
  procs = [forked.popen(['-c', HEARTBEAT_PROBE, address, str(i), str(timeout), ready[i]],
                        env=env, merge_stderr=True) for i in range(2)]
  deadline = time.time() + 120
  while not all(os.path.exists(path) for path in ready):
    assert time.time() < deadline and all(p.poll() is None for p in procs), 'not connected'
    time.sleep(0.05)
  time.sleep(timeout / 2 - 0.7)
  procs[1].kill()
  start = time.time()
  out = procs[0].communicate(timeout=60)[0]
  seconds = time.time() - start
  assert procs[0].returncode == -signal.SIGABRT, out[-2000:]
  assert 'stopped sending heartbeats' in out, out[-2000:]
  assert timeout / 2 - 0.5 <= seconds <= timeout + 2, seconds


def prepare_tiny_fashion_mnist(root):
  """A 40/16-image TFDS fashion_mnist in `root/tfds`, from idx files as Debian ships them."""
  from test_fashion_mnist import write_idx_gz  # noqa: PLC0415
  from vit_jax.data import fashion_mnist  # noqa: PLC0415
  idx, rng = os.path.join(root, 'idx'), np.random.default_rng(0)
  os.makedirs(idx, exist_ok=True)
  for split, n in (('train', 40), ('test', 16)):
    image_file, label_file = fashion_mnist.FILENAMES[split]
    labels = np.arange(n) % 10
    images = np.clip(rng.normal(20 * labels[:, None, None], 30, (n, 28, 28)), 0, 255)
    write_idx_gz(os.path.join(idx, image_file), images)
    write_idx_gz(os.path.join(idx, label_file), labels)
  fashion_mnist.prepare(os.path.join(root, 'tfds'), idx)
  return os.path.join(root, 'tfds')


def quickstart_args(tfds_dir):
  """The shrunk quickstart (`:runlocal`) on the tiny Fashion-MNIST. `data_sharding=stream`:
  every process walks the one-process stream (with 'split' each reads its own share, in
  another order, so the params differ by design)."""
  return [f'--config.{stage}.{field}={value}' for stage in ('pretrain', 'finetune')
          for field, value in (('tfds_data_dir', tfds_dir), ('data_sharding', 'stream'))]


QUICKSTART = os.path.join(ROOT, 'configs', 'fashion_mnist_quickstart.py') + ':runlocal'


@pytest.mark.slow
def test_two_stage_quickstart_on_two_processes_equals_one(tmp_path):
  """Stage 2 reads stage 1's params.npz only once process 0 wrote it (before: process 1 read it
  first, `No such file`, and process 0 hung in JAX's shutdown barrier until SIGABRT)."""
  args = quickstart_args(prepare_tiny_fashion_mnist(str(tmp_path)))
  multi_dir, single_dir = str(tmp_path / 'multi'), str(tmp_path / 'single')
  finish(launch_pair(QUICKSTART, multi_dir, args=args + ['--peer_timeout=20']), timeout=400)
  finish([launch(QUICKSTART, single_dir, devices=4, args=args)], timeout=400)
  for stage in ('pretrain', 'finetune'):
    single = npz_format.flatten(checkpoint.load(os.path.join(single_dir, stage, 'params.npz')))
    multi = npz_format.flatten(checkpoint.load(os.path.join(multi_dir, stage, 'params.npz')))
    assert single.keys() == multi.keys()
    for key, value in single.items():
      np.testing.assert_allclose(multi[key], value, atol=1e-5, err_msg=f'{stage}: {key}')


def launch_failing(config_path, workdir, *, process_id, port, raise_at_eval, args=()):
  """Process `process_id` of 2, whose first evaluation raises `raise_at_eval` (a user error
  or a bug) mid-run: what a peer of a failing process sees."""
  env = dict(os.environ, XLA_FLAGS=forked.xla_flags(2),
             JAX_PLATFORMS='cpu')
  env.pop('JAX_NUM_CPU_DEVICES', None)
  argv = ['main', f'--config={config_path}', f'--workdir={workdir}',
          f'--coordinator_address=127.0.0.1:{port}', '--num_processes=2',
          f'--process_id={process_id}', *args]
  code = ('import sys; from unittest import mock; from vit_jax import main\n'
          'from vit_jax.training import evaluation\n'
          f'sys.argv = {argv!r}\n'
          f'with mock.patch.object(evaluation, "run_eval", side_effect={raise_at_eval}):\n'
          '  main.run()\n')
  return forked.popen(['-c', code], cwd=ROOT, env=env, merge_stderr=True)


@pytest.mark.slow
@pytest.mark.parametrize('error', ['ValueError("the data went away")',
                                   'RuntimeError("a bug")'])
def test_an_error_in_one_process_ends_the_other_with_one_line(tmp_path, error):
  """Process 1 stops with an error mid-run; process 0 (in a collective it will never finish)
  stops within seconds, with one line naming it and exit 1: no barrier timeout, no dump."""
  dataset = write_image_dataset(str(tmp_path / 'data'), train_per_class=4, test_per_class=2)
  config_path = tmp_path / 'config.py'
  config_path.write_text(CONFIG_FILE.format(dataset=dataset, steps=6))
  workdir, port = str(tmp_path / 'multi'), free_port()
  args = ['--peer_timeout=60']
  procs = [launch(config_path, workdir, process_id=0, num_processes=2, port=port, args=args),
           launch_failing(config_path, workdir, process_id=1, port=port, raise_at_eval=error,
                          args=args)]
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    ended = list(pool.map(lambda p: (p.communicate(timeout=400)[0], time.time()), procs))
  outputs = [out for out, _ in ended]
  assert [p.returncode for p in procs] == [1, 1], outputs[0][-3000:] + outputs[1][-3000:]
  # Within a few watchdog beats of the failure, far from the peer timeout (60 s) and from
  # JAX's barrier timeout.
  assert ended[0][1] - ended[1][1] < 15, [t for _, t in ended]
  peer = [line for line in outputs[0].splitlines() if line.startswith('error:')]
  assert len(peer) == 1, outputs[0][-3000:]
  # A user error's own line; a bug's type and first line (its traceback is process 1's).
  said = 'the data went away' if error.startswith('ValueError') else 'RuntimeError'
  assert peer[0].startswith('error: process 1 of 2 stopped with an error ('), peer[0]
  assert said in peer[0] and 'restart all 2 processes' in peer[0], peer[0]
  assert 'Traceback' not in outputs[0] and 'SIGABRT' not in outputs[0], outputs[0][-3000:]
  assert 'Fatal Python error' not in outputs[1], outputs[1][-3000:]
