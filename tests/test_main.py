"""`python -m vit_jax.main` as users run it: one-line errors, no traceback."""

import glob
import json
import os
import signal
import socket
import time

import pytest

import forked
from test_distributed import CONFIG_FILE, launch, seconds_from_checkpoint_to_exit
from test_distributed import write_image_dataset
from vit_jax import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def online() -> bool:
  try:
    socket.create_connection(('storage.googleapis.com', 443), timeout=3).close()
    return True
  except OSError:
    return False


def run_main(*args, env=None, timeout=120):
  env = dict(os.environ, JAX_PLATFORMS='cpu', **(env or {}))
  start = time.time()
  proc = forked.run(['-m', 'vit_jax.main', *args], cwd=ROOT, env=env, timeout=timeout)
  return proc, time.time() - start


@pytest.mark.skipif(online(), reason='checks the offline message; this machine is online')
def test_offline_official_command_names_what_is_missing(tmp_path):
  proc, seconds = run_main('--config=configs/vit_b16_cifar10.py', f'--workdir={tmp_path}/w',
                           env={'TFDS_DATA_DIR': str(tmp_path / 'tfds')})
  assert proc.returncode == 1
  assert seconds < 60
  error = [line for line in proc.stderr.splitlines() if line.startswith('error:')]
  assert len(error) == 1, proc.stderr[-2000:]
  assert 'cifar10' in error[0] and 'ViT-B_16.npz' in error[0]
  assert 'tfds_data_dir' in error[0] and 'pretrained_path' in error[0]
  assert 'Traceback' not in proc.stderr


def test_unknown_config_field_is_rejected(tmp_path):
  proc, _ = run_main('--config=configs/fashion_mnist_quickstart.py', '--config.no_such_field=1',
                     f'--workdir={tmp_path}/w')
  assert proc.returncode != 0
  assert 'no_such_field' in proc.stderr
  assert 'Traceback' not in proc.stderr


def test_unreadable_folder_ends_the_process_with_one_line(tmp_path):
  """An error inside tf.data (all files cut short): one line and exit code 1, promptly.

  Before, the failed iterator lived until interpreter exit, where its threads could wait forever
  for a `numpy_function` call (a race: some runs hung, others printed a traceback).
  """
  for split in ('train', 'test'):
    for label in ('a', 'b'):
      os.makedirs(tmp_path / 'data' / split / label)
      for i in range(20):  # With 10 a class, main's old code sometimes exited (a race).
        (tmp_path / 'data' / split / label / f'{i}.jpg').write_bytes(b'\xff\xd8\xff\xe0 cut')
  proc, seconds = run_main(
      f'--config=configs/vit.py:testing,{tmp_path}/data', '--config.pretrained_dir=',
      '--config.pp.crop=16', '--config.batch=4', '--config.batch_eval=4',
      '--config.accum_steps=1', '--config.total_steps=4', f'--workdir={tmp_path}/w', timeout=120)
  assert proc.returncode == 1, proc.stderr[-2000:]
  error = [line for line in proc.stderr.splitlines() if line.startswith('error:')]
  assert error == ['error: The input pipeline failed: 16 unreadable image files in a row (see '
                   'the warnings above); fix the dataset.'], proc.stderr[-2000:]
  assert 'Traceback' not in proc.stderr and seconds < 120


def test_training_on_the_eval_images_is_a_one_line_error(tmp_path):
  """The README's folder command on train/ only, with the held-out slice asked for in training."""
  import numpy as np  # noqa: PLC0415
  from PIL import Image  # noqa: PLC0415
  for label in ('a', 'b'):
    os.makedirs(tmp_path / 'data' / 'train' / label)
    for i in range(50):
      Image.fromarray(np.full((4, 4, 3), i, np.uint8)).save(
          tmp_path / 'data' / 'train' / label / f'{i}.png')
  proc, _ = run_main(f'--config=configs/vit.py:testing,{tmp_path}/data', '--config.pretrained_dir=',
                     '--config.pp.train=train[:100%]', f'--workdir={tmp_path}/w')
  assert proc.returncode == 1, proc.stderr[-2000:]
  error = [line for line in proc.stderr.splitlines() if line.startswith('error:')]
  assert len(error) == 1 and error[0].startswith(
      "error: config.pp.train='train[:100%]' and config.pp.test='test' share 2 of the 2 eval "
      'examples'), proc.stderr[-2000:]
  assert '--config.pp.train=train[:98%] --config.pp.test=train[98%:]' in error[0]
  assert 'Traceback' not in proc.stderr


def test_rerun_command_names_the_workdir_even_when_it_was_a_default():
  from vit_jax import main
  assert main.rerun_command('runs/20261124-2210', ['--config=c.py', '--config.batch=64']) == (
      'python -m vit_jax.main --config=c.py --config.batch=64 --workdir=runs/20261124-2210')
  assert main.rerun_command('a b', ['--workdir', 'a b', '--config=c.py']) == (
      "python -m vit_jax.main --config=c.py '--workdir=a b'")


def test_a_stop_with_work_left_is_found_in_either_stage():
  from vit_jax import main
  assert main.stopped_at({'stopped_at': 3, 'accuracy': .5}) == 3
  assert main.stopped_at({'pretrain': {'stopped_at': 7}}) == 7
  assert main.stopped_at({'pretrain': {'step': 9}, 'finetune': {'stopped_at': 2}}) == 2
  assert main.stopped_at({'pretrain': {'step': 9}, 'finetune': {'step': 4}}) is None
  assert main.EXIT_STOPPED == 143


def test_default_workdir_is_named_by_the_command_alone():
  name = main.default_workdir('configs/vit.py:b16,cifar10', {'batch': 64, 'pp.crop': 32})
  assert name.startswith(os.path.join('runs', 'vit_b16_cifar10-')), name
  # Order and spelling of the same command do not matter ...
  assert main.default_workdir('./configs/vit.py:b16,cifar10', {'pp.crop': 32, 'batch': 64}) == name
  absolute = os.path.abspath('configs/vit.py')  # Relative or absolute: the same file.
  assert main.default_workdir(f'{absolute}:b16,cifar10', {'pp.crop': 32, 'batch': 64}) == name
  # ... any other file, arg or override value does.
  others = [main.default_workdir('configs/vit.py:b16,cifar10', {'batch': 32, 'pp.crop': 32}),
            main.default_workdir('configs/vit.py:b16,cifar10', {'batch': 64}),
            main.default_workdir('configs/vit.py:b16,cifar100', {'batch': 64, 'pp.crop': 32}),
            main.default_workdir('other/vit.py:b16,cifar10', {'batch': 64, 'pp.crop': 32})]
  assert len({name, *others}) == 5, others
  assert main.default_workdir('configs/vit.py:b16,/data/my images', {}).startswith(
      os.path.join('runs', 'vit_b16_data_my_images-'))


# `python -m vit_jax.main ARGS`, with 60 s of work left for the interpreter's exit, as the teardown
# of TensorFlow's and JAX's objects (5-20 s measured after a SIGTERM's checkpoint, 2 vCPUs).
MAIN_WITH_SLOW_TEARDOWN = (
    'import atexit, time\n'
    'atexit.register(time.sleep, 60)\n'
    'from vit_jax import main\n'
    'main.run()\n')


@pytest.mark.slow
def test_same_command_twice_without_workdir_continues_one_run(tmp_path):
  """Stopped by SIGTERM after its first checkpoint (and gone within 10 s of the stop's
  checkpoint), the same command resumes the same run."""
  dataset = write_image_dataset(str(tmp_path / 'data'), train_per_class=4, test_per_class=2)
  (tmp_path / 'config.py').write_text(CONFIG_FILE.format(dataset=dataset, steps=6))
  first = launch('config.py', None, devices=1, cwd=tmp_path,
                 python=('-c', MAIN_WITH_SLOW_TEARDOWN))
  deadline = time.time() + 240
  while not glob.glob(str(tmp_path / 'runs' / '*' / 'train_state' / '2')):
    assert time.time() < deadline and first.poll() is None, first.communicate()[0][-3000:]
    time.sleep(0.2)
  first.send_signal(signal.SIGTERM)
  checkpoints = os.path.dirname(glob.glob(str(tmp_path / 'runs' / '*' / 'train_state' / '2'))[0])
  to_exit = seconds_from_checkpoint_to_exit([first], checkpoints)
  out_first = first.communicate(timeout=120)[0]
  assert first.returncode == main.EXIT_STOPPED, out_first[-3000:]
  # Within 10 s of the checkpoint, without waiting for the interpreter's teardown (issue 62: 58 s,
  # tf.data closing its pipeline, then the teardown).
  assert to_exit[0] < 10, to_exit
  runs = os.listdir(tmp_path / 'runs')
  assert len(runs) == 1 and not os.path.exists(tmp_path / 'runs' / runs[0] / 'params.npz')

  second = launch('config.py', None, devices=1, cwd=tmp_path)
  out_second = second.communicate(timeout=300)[0]
  assert second.returncode == 0, out_second[-3000:]
  assert os.listdir(tmp_path / 'runs') == runs
  assert 'Resuming from checkpoint at step' in out_second, out_second[-3000:]
  # Printed at the start (so a user can find the run while it trains) and at the end.
  assert f'Run directory: runs/{runs[0]}' in out_first, out_first[-3000:]
  assert f'Workdir: runs/{runs[0]}' in out_second
  assert os.path.isfile(tmp_path / 'runs' / runs[0] / 'params.npz')


@pytest.mark.slow
def test_a_renamed_copy_of_a_trained_posemb_none_model_predicts_the_same(tmp_path, capsys):
  """The user's path of issue 28.5: train with posemb='none', copy params.npz under another
  name elsewhere, predict with the copy: the same probabilities as with the run directory."""
  from vit_jax.tools import cli  # noqa: PLC0415
  from vit_jax.tools import predict  # noqa: PLC0415  # TF-heavy; only this test needs it.
  dataset = write_image_dataset(str(tmp_path / 'data'), train_per_class=4, test_per_class=2)
  dropout = 'config.model.transformer.dropout_rate = 0.'
  config = CONFIG_FILE.format(dataset=dataset, steps=2)  # 32px, the 'testing' ViT.
  (tmp_path / 'config.py').write_text(config.replace(
      dropout, f"{dropout}\n  config.model.posemb = 'none'"))
  proc = launch('config.py', 'run', devices=1, cwd=tmp_path)
  out = proc.communicate(timeout=300)[0]
  assert proc.returncode == 0, out[-3000:]
  images = sorted(glob.glob(os.path.join(dataset, 'test', '*', '*.png')))
  copy = tmp_path / 'elsewhere' / 'fmnist_vit.npz'
  copy.parent.mkdir()
  copy.write_bytes((tmp_path / 'run' / 'params.npz').read_bytes())
  results = []
  for target in (tmp_path / 'run', copy):
    assert cli.call(predict, ['predict', f'--checkpoint={target}', '--json', *images]) == 0
    results.append(json.loads(capsys.readouterr().out))
  assert results[1]['image_size'] == results[0]['image_size'] == 32
  for a, b in zip(results[0]['results'], results[1]['results']):
    assert a['predictions'] == b['predictions']
