"""A damaged newest checkpoint: named in the log, kept on disk, the newest readable one resumed."""

import logging
import os

import numpy as np
import pytest

from vit_jax import train
from vit_jax.weights import npz_format
from test_train import crash_at, final_params, make_config


def snapshot(directory):
  """Every file under `directory` with its bytes, to show that nothing was changed."""
  files = {}
  for root, _, names in os.walk(directory):
    for name in names:
      path = os.path.join(root, name)
      with open(path, 'rb') as f:
        files[os.path.relpath(path, directory)] = f.read()
  return files


def truncate(step_dir, name):
  """Halves the first file called `name` under `step_dir`; returns its path."""
  for root, _, names in os.walk(step_dir):
    if name in names:
      path = os.path.join(root, name)
      with open(path, 'r+b') as f:
        f.truncate(os.path.getsize(path) // 2)
      return path
  raise AssertionError(f'no {name} under {step_dir}')


@pytest.mark.usefixtures('mock_cifar10')
@pytest.mark.parametrize('damaged_file', ['_sharding', '_METADATA'])
def test_damaged_newest_checkpoint_resumes_from_the_previous_one(tmp_path, caplog, damaged_file):
  config = make_config(total_steps=8, checkpoint_every=2, eval_every=0, keep_checkpoints=2)
  straight = str(tmp_path / 'straight')
  train.train_and_evaluate(config, straight)
  workdir = str(tmp_path / 'damaged')
  with crash_at(7), pytest.raises(KeyboardInterrupt):
    train.train_and_evaluate(config, workdir)
  checkpoints = os.path.join(workdir, 'train_state')
  assert sorted(os.listdir(checkpoints), key=int) == ['4', '6']
  truncate(os.path.join(checkpoints, '6'), damaged_file)
  damaged = snapshot(os.path.join(checkpoints, '6'))

  with caplog.at_level(logging.INFO):
    result = train.train_and_evaluate(config, workdir)
  assert result['step'] == 8
  named = [r.getMessage() for r in caplog.records if 'cannot be read' in r.getMessage()]
  assert len(named) == 1 and f'{checkpoints}/6 cannot be read' in named[0]
  assert any('Resuming from checkpoint at step 4' in r.getMessage() for r in caplog.records)
  # The damaged step is neither overwritten by step 6 of the resumed run, nor deleted when step 8
  # makes it one of more than keep_checkpoints=2.
  assert any('Not saving step 6' in r.getMessage() for r in caplog.records)
  assert sorted(os.listdir(checkpoints), key=int) == ['4', '6', '8']
  assert snapshot(os.path.join(checkpoints, '6')) == damaged
  ours, theirs = (npz_format.flatten(final_params(d)) for d in (workdir, straight))
  assert ours.keys() == theirs.keys()
  for key in ours:  # Resume is exact: bit-identical to the run that was never interrupted.
    np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)


@pytest.mark.usefixtures('mock_cifar10')
def test_no_readable_checkpoint_is_a_clear_error_and_deletes_nothing(tmp_path):
  config = make_config(total_steps=4, checkpoint_every=2, eval_every=0)
  workdir = str(tmp_path / 'run')
  train.train_and_evaluate(config, workdir)
  checkpoints = os.path.join(workdir, 'train_state')
  for step in ('2', '4'):
    truncate(os.path.join(checkpoints, step), '_sharding')
  before = snapshot(workdir)
  with pytest.raises(ValueError, match=r'No checkpoint in \S+ can be read \(steps 4, 2; see the '
                     r'log\): start a new --workdir, or move the damaged step directories'):
    train.train_and_evaluate(config, workdir)
  after = snapshot(workdir)
  assert {k: v for k, v in after.items() if 'events' not in k} == {
      k: v for k, v in before.items() if 'events' not in k}
