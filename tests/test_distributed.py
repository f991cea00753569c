"""Scale-out: 1, 2 and 4 devices give the same step; 2 processes equal 1; resume across both.

conftest.py forces 4 CPU devices for the whole test session.
"""

import glob
import os
import re
import signal
import socket
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

from test_damaged_checkpoints import truncate
from vit_jax import checkpoint
from vit_jax import config_lib
from vit_jax import main
from vit_jax import models
from vit_jax.training import optim
from vit_jax.training import parallel
from vit_jax import train
from vit_jax.checkpoints import npz_format

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
  tx = optim.make_optimizer(config, optim.learning_rate_schedule(
      total_steps=10, base_lr=0.1, decay_type='cosine', warmup_steps=1))
  params = model.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)), train=False)['params']
  params = jax.tree.map(lambda x: x + 0.02, params)  # Non-zero head: all grads non-trivial.
  state = parallel.put_replicated({'params': params, 'opt_state': tx.init(params),
                                   'step': jnp.zeros((), jnp.int32),
                                   'rng': jax.random.key_data(jax.random.key(0))}, mesh)
  train_step = train.make_train_step(model, tx, config, mesh)
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
           devices=2, args=(), cwd=ROOT):
  """`python -m vit_jax.main` in `cwd`; `workdir=None` leaves the run directory to the command."""
  env = dict(os.environ, XLA_FLAGS=f'--xla_force_host_platform_device_count={devices}',
             JAX_PLATFORMS='cpu')
  env.pop('JAX_NUM_CPU_DEVICES', None)
  command = [sys.executable, '-m', 'vit_jax.main', f'--config={config_path}']
  command += [f'--workdir={workdir}'] if workdir else []
  command += list(args)
  if process_id is not None:
    command += [f'--coordinator_address=127.0.0.1:{port}', f'--num_processes={num_processes}',
                f'--process_id={process_id}']
  return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


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
  while not os.path.isdir(os.path.join(workdir, 'checkpoints', str(step))):
    assert time.time() < deadline and all(p.poll() is None for p in procs), 'no checkpoint'
    time.sleep(0.2)


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
  assert os.path.isdir(run_dir / 'checkpoints' / '2')
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
  first = [p.communicate(timeout=120)[0] for p in procs]
  assert [p.returncode for p in procs] == [main.EXIT_STOPPED] * 2, first[1][-3000:]
  stops = [re.findall(r'^Stopped at step (\d+) by SIGTERM; checkpoint saved in \S+\. To '
                      r'continue: python -m vit_jax\.main .*', out, re.M) for out in first]
  assert [len(s) for s in stops] == [1, 1], first[0][-2000:]
  stopped = [int(s[0]) for s in stops]
  assert stopped[0] == stopped[1] > 2
  assert not os.path.exists(os.path.join(multi_dir, 'params.npz')), first[0][-2000:]

  # The newest checkpoint damaged: both processes agree to fall back to the same older one.
  checkpoints = os.path.join(multi_dir, 'checkpoints')
  steps = sorted(int(name) for name in os.listdir(checkpoints))
  assert steps[-1] == stopped[0]
  truncate(os.path.join(checkpoints, str(steps[-1])), '_sharding')
  outputs = finish(launch_pair(config_path, multi_dir))
  for out in outputs:
    assert f'checkpoints/{steps[-1]} cannot be read' in out, out[-3000:]
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
def test_a_killed_process_ends_the_other_with_one_line(tmp_path):
  dataset = write_image_dataset(str(tmp_path / 'data'))
  config_path = tmp_path / 'config.py'
  config_path.write_text(CONFIG_FILE.format(dataset=dataset, steps=10_000))
  workdir = str(tmp_path / 'multi')
  procs = launch_pair(config_path, workdir, args=['--peer_timeout=5'])
  wait_for_checkpoint(procs, workdir)
  procs[1].kill()
  start = time.time()
  out = procs[0].communicate(timeout=120)[0]
  seconds = time.time() - start
  assert procs[0].returncode == parallel.EXIT_PEER_LOST, out[-3000:]
  lines = [line for line in out.splitlines() if line.startswith('error:')]
  assert len(lines) == 1, out[-3000:]
  assert lines[0].startswith('error: lost process 1 of 2 (no heartbeat for 5 s)')
  assert f'--process_id=0 --workdir={workdir}' in lines[0] and 'Traceback' not in out
  # The watchdog's timeout, not JAX's abort 30 s later (measured: 5 + about 1 s). The clock
  # starts at the kill, but silence is counted from the peer's last beat seen, which came up to
  # one watchdog round (1 s, longer on a loaded machine: 4.35 s seen once in CI) before it.
  assert 5 - 3 <= seconds < 5 + parallel.JAX_HEARTBEAT_MARGIN_S, seconds
  assert os.path.isdir(os.path.join(workdir, 'checkpoints', '2'))  # Kept for the rerun.
