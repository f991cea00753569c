"""`benchmarks/gpu_e2e.py` end to end on CPU (`--tiny`), its figures, and the switches it sets."""

import json
import os
import subprocess
import sys
from unittest import mock

import numpy as np
import pytest
from absl import flags
from PIL import Image

from vit_jax import config_lib
from vit_jax import models
from vit_jax import train
from vit_jax.tools import flops
from vit_jax.training import progress as progress_lib

BENCHMARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'benchmarks')
sys.path.insert(0, BENCHMARKS)
import e2e_workers  # noqa: E402  # Scripts in benchmarks/, not part of the package.
import gpu_e2e  # noqa: E402


@pytest.fixture(scope='module')
def tiny_run(tmp_path_factory):
  """One `--tiny` run with its switches on: `--prefetch=3`, an XLA flag (its default) and
  `--uint8_batches` (the end-to-end run and the step-only worker train on uint8 batches)."""
  out, scratch = tmp_path_factory.mktemp('out'), tmp_path_factory.mktemp('scratch')
  proc = subprocess.run(
      [sys.executable, os.path.join(BENCHMARKS, 'gpu_e2e.py'), '--tiny', f'--out={out}',
       f'--scratch={scratch}', '--prefetch=3', '--xla_flags=--xla_cpu_enable_fast_math=false',
       '--uint8_batches'],
      capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  with open(os.path.join(out, 'gpu_e2e.json')) as f:
    return json.load(f), proc.stdout, out


def test_tiny_run_reports_every_figure(tiny_run):
  result, stdout, out = tiny_run
  assert result['e2e_img_s'] > 0 and 0 <= result['data_wait_fraction'] <= 1
  assert result['compile_s'] > 0 and result['e2e_wall_s'] > 0
  assert result['peak_memory_mb'] is None  # CPU keeps no allocator statistics.
  # MFU from vit_jax.flops: 3 x the forward FLOPs of the run's model at its crop and classes.
  forward = flops.count_flops(models.get_config('testing'), 32, 4)['total']
  assert result['train_flops_per_image'] == 3 * forward
  assert result['mfu'] == pytest.approx(result['e2e_img_s'] * 3 * forward / 989e12)
  assert len(result['interval_img_s']) == 3  # 6 steps, progress every 2.
  for kind in ('jax', 'timm'):
    assert result['step_only'][kind]['img_s'] > 0
    assert len(result['step_only'][kind]['block_s']) == 2  # Two A/B rounds.
  assert result['e2e_over_step_only'] > 0 and result['ours_over_timm'] > 0
  assert result['step_only']['jax']['trace'] and all(
      os.path.isfile(p) and p.startswith(str(out)) for p in result['step_only']['jax']['trace'])
  assert os.path.isfile(os.path.join(out, 'metrics.jsonl'))
  assert gpu_e2e.MARKDOWN_HEADER in stdout and '| testing 32px b8 bfloat16 fused |' in stdout


def test_tiny_run_applies_the_switches(tiny_run):
  result, _, _ = tiny_run
  assert result['settings']['prefetch'] == 3 and '--config.prefetch=3' in result['e2e_command']
  assert result['settings']['xla_flags'] == '--xla_cpu_enable_fast_math=false'
  assert result['settings']['uint8_batches']
  assert '--config.pp.uint8_batches=True' in result['e2e_command']


def test_xla_flags_are_appended_to_the_environment():
  settings = mock.Mock(xla_flags='--xla_b=1')
  with mock.patch.dict(os.environ, {'XLA_FLAGS': '--xla_a=0'}):
    assert gpu_e2e.jax_env(settings)['XLA_FLAGS'] == '--xla_a=0 --xla_b=1'
  with mock.patch.dict(os.environ, {'XLA_FLAGS': ''}):
    assert gpu_e2e.jax_env(mock.Mock(xla_flags=''))['XLA_FLAGS'] == ''


def test_steady_state_leaves_out_the_first_interval():
  # Batch 4 on 2 devices: 10 steps in 20 s (compile), then 10 steps in 2 s and 10 in 3 s.
  records = [
      {'step': 10, 'img_sec_core_train': 4 * 10 / 20 / 2, 'data_wait_fraction': .5,
       'train_loss': 2.},
      {'step': 20, 'img_sec_core_train': 4 * 10 / 2 / 2, 'data_wait_fraction': .1,
       'train_loss': 1.5, 'peak_memory_mb': 100.},
      {'step': 20, 'accuracy_test': .5},  # An eval record: not an interval.
      {'step': 30, 'img_sec_core_train': 4 * 10 / 3 / 2, 'data_wait_fraction': .2,
       'train_loss': 1., 'peak_memory_mb': 120.}]
  steady = gpu_e2e.steady_state(records, batch=4, devices=2)
  assert steady['img_s'] == pytest.approx(4 * 20 / 5)
  assert steady['data_wait_fraction'] == pytest.approx((.1 * 2 + .2 * 3) / 5)
  assert steady['first_interval_overhead_s'] == pytest.approx(20 - 10 * 5 / 20)
  assert steady['peak_memory_mb'] == 120. and steady['final_train_loss'] == 1.
  with pytest.raises(ValueError, match='needs 2'):
    gpu_e2e.steady_state(records[:1], batch=4, devices=2)


def test_compile_time_is_the_train_steps_own():
  log = '\n'.join([
      'W1126 dispatch.py:204] Finished tracing fresh_params for jit in 3.0 sec',
      'W1126 dispatch.py:204] Finished XLA compilation of jit(fresh_params) in 14.0 sec',
      'W1126 dispatch.py:204] Finished tracing train_step for jit in 0.5 sec',
      'W1126 dispatch.py:204] Finished jaxpr to MLIR module conversion jit(train_step) in 1.25 sec',
      'W1126 dispatch.py:204] Finished XLA compilation of jit(train_step) in 30.0 sec',
      'W1126 dispatch.py:204] Finished XLA compilation of jit(eval_step) in 9.0 sec'])
  assert gpu_e2e.train_step_compile_s(log) == pytest.approx(31.75)
  assert gpu_e2e.train_step_compile_s('no compile lines') is None


@pytest.mark.parametrize('argv, message', [
    (['--tiny', '--steps=3'], 'leaves no interval after the first'),
    (['--batch=0'], '--batch=0 must be at least 1'),
    (['--peak_tflops=0'], 'must be positive'),
    (['--profile_steps=-1'], 'must be 0 (no trace) or more'),
    (['extra'], 'unexpected arguments'),
])
def test_bad_flags_are_one_line(argv, message, capsys):
  assert gpu_e2e.main(['gpu_e2e.py', *argv]) == 1
  err = capsys.readouterr().err
  assert message in err and len(err.strip().splitlines()) == 1


def test_importing_the_script_defines_no_global_flags():
  assert not [m for m in flags.FLAGS.flags_by_module_dict() if 'gpu_e2e' in m]


class _FakeDevice:

  def __init__(self, peak):
    self.peak = peak

  def memory_stats(self):
    return None if self.peak is None else {'peak_bytes_in_use': self.peak, 'bytes_in_use': 1}


@pytest.mark.parametrize('peaks, expected', [((2**30, 3 * 2**29), 1536.), ((None,), None)])
def test_progress_records_peak_device_memory(tmp_path, peaks, expected):
  history = str(tmp_path / 'metrics.jsonl')
  log = progress_lib.ProgressLog(mock.Mock(), total=4, start_step=0, batch=2,
                                 history_path=history)
  with mock.patch('jax.local_devices', return_value=[_FakeDevice(p) for p in peaks]):
    log.train(2, lr=0.1)
  with open(history) as f:
    record = json.loads(f.readline())
  assert record.get('peak_memory_mb') == expected and 'img_sec_core_train' in record


def _write_folder(root, classes=2, per_class=6):
  rng = np.random.default_rng(0)
  for split, count in (('train', per_class), ('test', 2)):
    for c in range(classes):
      os.makedirs(os.path.join(root, split, f'c{c}'))
      for i in range(count):
        Image.fromarray(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(
            os.path.join(root, split, f'c{c}', f'{i}.jpg'))
  return str(root)


def test_prefetch_depth_does_not_change_training(tmp_path):
  """--prefetch (config.prefetch) moves batches earlier, never changes which or what order."""
  root = _write_folder(tmp_path / 'data')
  losses = []
  for prefetch in (1, 3):
    config = config_lib.with_model(config_lib.get_config(), 'testing')
    config.dataset = root
    config.pp.update(dict(train='train', test='test', crop=16))
    config.update(dict(pretrained_dir='', total_steps=4, batch=4, batch_eval=4, accum_steps=1,
                       warmup_steps=1, progress_every=1, eval_every=4, checkpoint_every=0,
                       prefetch=prefetch))
    workdir = str(tmp_path / f'run{prefetch}')
    train.train_and_evaluate(config, workdir)
    with open(os.path.join(workdir, 'metrics.jsonl')) as f:
      losses.append([r['train_loss'] for r in map(json.loads, f) if 'train_loss' in r])
  assert len(losses[0]) == 4 and losses[0] == losses[1]


class _FakeWorker:
  """A step-only worker whose timm side fails to start (as torch.compile or an OOM would)."""

  def __init__(self, kind, env, spec):
    del env, spec
    self.kind, self.blocks = kind, []

  def read(self):
    if self.kind == 'timm':
      raise RuntimeError('the timm worker exited with 1')
    return {'devices': 1, 'device': 'cpu', 'train_flops_per_image': 3.}

  def block(self, steps):
    self.blocks.append(0.5)

  def ask(self, command):
    assert command == 'profile 1'
    return {'trace': ['t.pb']}

  def finish(self):
    return {'peak_memory_mb': None}


def test_a_failed_timm_worker_keeps_the_jax_figures():
  settings = mock.Mock(timm=True, rounds=2, block_steps=3, batch=4, profile_steps=1,
                       xla_flags='')
  with mock.patch.object(e2e_workers, 'Worker', _FakeWorker), \
      mock.patch.object(gpu_e2e, 'worker_spec', return_value={}):
    result = gpu_e2e.run_step_only(settings, 'folder')
  assert result['errors'] == {'timm': 'the timm worker exited with 1'}
  assert result['workers']['jax']['img_s'] == pytest.approx(4 * 3 / 0.5)
  assert result['workers']['jax']['trace'] == ['t.pb'] and 'timm' not in result['workers']


def test_a_worker_started_by_hand_says_how_it_is_started(capsys):
  assert e2e_workers.main(['e2e_workers.py', 'torch']) == 1
  err = capsys.readouterr().err
  assert 'started by benchmarks/gpu_e2e.py' in err and len(err.strip().splitlines()) == 1
