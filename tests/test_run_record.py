"""A run directory is what its record (run.json) says: a rerun on other data or another config
stops before touching anything; resuming never needs the pretrained source."""

import json
import os
import shutil
from unittest import mock

import numpy as np
import pytest
from PIL import Image

import forked
from test_distributed import CONFIG_FILE
from vit_jax import config_lib
from vit_jax import train
from vit_jax.weights import resume
from vit_jax.training import run_record

CLASSES = ('cat', 'dog', 'eel')


def write_animals(root, train_per_class=4, test_per_class=2):
  """train/ and test/ with classes cat, dog, eel (brightness differs by class)."""
  rng = np.random.default_rng(0)
  for split, count in (('train', train_per_class), ('test', test_per_class)):
    for c, name in enumerate(CLASSES):
      folder = os.path.join(root, split, name)
      os.makedirs(folder, exist_ok=True)
      for i in range(count):
        pixels = np.clip(rng.normal(60 + 70 * c, 30, (16, 16, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(os.path.join(folder, f'{i}.png'))
  return root


def rename_class(root, old, new):
  for split in ('train', 'test'):
    os.rename(os.path.join(root, split, old), os.path.join(root, split, new))


def snapshot(directory):
  """Every file under `directory`: (size, mtime_ns, bytes)."""
  files = {}
  for parent, _, names in os.walk(directory):
    for name in names:
      path = os.path.join(parent, name)
      with open(path, 'rb') as f:
        files[os.path.relpath(path, directory)] = (os.stat(path).st_mtime_ns, f.read())
  return files


def run_command(cwd, *args):
  """`python -m vit_jax.main --config=config.py ARGS` in `cwd` on one CPU device, no --workdir."""
  env = dict(os.environ, JAX_PLATFORMS='cpu',
             XLA_FLAGS=forked.xla_flags(1))
  env.pop('JAX_NUM_CPU_DEVICES', None)
  return forked.run(['-m', 'vit_jax.main', '--config=config.py', *args], cwd=cwd, env=env,
                    timeout=300)


def only_run_dir(cwd):
  runs = os.listdir(os.path.join(cwd, 'runs'))
  assert len(runs) == 1, runs
  return os.path.join(cwd, 'runs', runs[0])


def error_lines(proc):
  return [line for line in proc.stderr.splitlines() if line.startswith('error:')]


@pytest.mark.slow
def test_a_rerun_on_renamed_classes_or_an_edited_config_changes_nothing(tmp_path):
  """Issue 39.2 as a user meets it: the same command after `cat` became `zebra` (before: it
  resumed, overwrote params.npz and metadata.json with classes [dog, eel, zebra] for a head
  trained on [cat, dog, eel]), then after an edit of the config file (same command line)."""
  data = write_animals(str(tmp_path / 'data'))
  (tmp_path / 'config.py').write_text(CONFIG_FILE.format(dataset=data, steps=2))
  first = run_command(tmp_path)
  assert first.returncode == 0, first.stderr[-3000:]
  run_dir = only_run_dir(tmp_path)
  before = snapshot(run_dir)
  assert {'train.log', 'metadata.json', 'params.npz'} <= set(before)

  rename_class(data, 'cat', 'zebra')
  refused = run_command(tmp_path)
  assert refused.returncode == 1, refused.stderr[-3000:]
  assert len(error_lines(refused)) == 1, refused.stderr[-3000:]
  line = error_lines(refused)[0]
  assert "the classes are now ['dog', 'eel', 'zebra']" in line and "'cat'" in line
  assert 'new --workdir' in line and '--config.allow_changed_inputs=True' in line
  assert 'Traceback' not in refused.stderr
  assert only_run_dir(tmp_path) == run_dir and snapshot(run_dir) == before

  rename_class(data, 'zebra', 'cat')
  (tmp_path / 'config.py').write_text(
      CONFIG_FILE.format(dataset=data, steps=2).replace('base_lr=0.05', 'base_lr=0.1'))
  edited = run_command(tmp_path)
  assert edited.returncode == 1 and len(error_lines(edited)) == 1, edited.stderr[-3000:]
  assert 'config base_lr is 0.1 (was 0.05)' in error_lines(edited)[0]
  assert snapshot(run_dir) == before

  # Continued anyway: accepted, recorded; the finished head still says what it was trained on.
  rename_class(data, 'cat', 'zebra')
  anyway = run_command(tmp_path, '--config.allow_changed_inputs=True')
  assert anyway.returncode == 0, anyway.stderr[-3000:]
  with open(os.path.join(run_dir, 'run.json')) as f:
    record = json.load(f)
  assert record['history'][-1]['event'].startswith('continued with changed inputs')
  assert any('zebra' in change for change in record['history'][-1]['changes'])
  assert any('base_lr' in change for change in record['history'][-1]['changes'])
  assert record['config']['base_lr'] == 0.1
  with open(os.path.join(run_dir, 'metadata.json')) as f:
    assert json.load(f)['class_names'] == list(CLASSES)
  assert record['class_names'] == list(CLASSES)  # A finished head: no step on the new names.
  assert record['dataset']['kind'] == 'folder'
  assert record['dataset']['class_names'] == ['dog', 'eel', 'zebra']
  assert record['dataset']['files']['train']['images'] == 12
  assert record['model']['hidden_size'] == 10


def folder_config(data, steps, **overrides):
  config = config_lib.with_dataset(config_lib.with_model(config_lib.get_config(), 'testing'),
                                   data)
  config.model.transformer.dropout_rate = 0.
  config.pp.update(dict(crop=32, train_aug='flip'))
  config.update(dict(pretrained_dir='', total_steps=steps, batch=4, batch_eval=4, accum_steps=1,
                     warmup_steps=1, optim_dtype='float32', progress_every=1, eval_every=100,
                     checkpoint_every=2, prefetch=1))
  config.update(overrides)
  return config


class Stopped(Exception):
  """Ends a run right after a checkpoint, as a crash or a kill would."""


def train_until_first_checkpoint(config, workdir):
  save = resume.save_checkpoint

  def save_then_stop(manager, step, state):
    save(manager, step, state)
    manager.wait_until_finished()
    raise Stopped(step)

  with mock.patch.object(resume, 'save_checkpoint', save_then_stop), \
       pytest.raises(Stopped):
    train.train_and_evaluate(config, workdir)


def test_an_unfinished_run_does_not_train_on_relabelled_data(tmp_path):
  data = write_animals(str(tmp_path / 'data'))
  workdir = str(tmp_path / 'run')
  train_until_first_checkpoint(folder_config(data, 4), workdir)
  assert not os.path.exists(os.path.join(workdir, 'params.npz'))
  before = snapshot(workdir)
  rename_class(data, 'cat', 'zebra')
  with pytest.raises(run_record.ChangedInputsError, match=r'classes are now .*zebra'):
    train.train_and_evaluate(folder_config(data, 4), workdir)
  assert snapshot(workdir) == before
  # Another file of the same name and size elsewhere is the same data; a rewritten file not.
  rename_class(data, 'zebra', 'cat')
  image = os.path.join(data, 'test', 'dog', '0.png')
  Image.new('RGB', (40, 40), 'white').save(image)
  with pytest.raises(run_record.ChangedInputsError, match=r'the files of test/ changed'):
    train.train_and_evaluate(folder_config(data, 4), workdir)
  assert snapshot(workdir) == before


def test_extending_a_run_is_not_a_change_of_inputs(tmp_path):
  data = write_animals(str(tmp_path / 'data'))
  workdir = str(tmp_path / 'run')
  train.train_and_evaluate(folder_config(data, 2), workdir)
  moved = str(tmp_path / 'moved_data')
  shutil.move(data, moved)  # The same files elsewhere: the same data.
  result = train.train_and_evaluate(folder_config(moved, 4, eval_every=3), workdir)
  assert result['step'] == 4
  with open(os.path.join(workdir, 'run.json')) as f:
    assert [h['event'] for h in json.load(f)['history']] == ['started']


def test_a_hub_fine_tune_resumes_without_its_hub_folder(tmp_path):
  """Issue 39.4: the model and mean/std the hub folder contributed come from the record."""
  pytest.importorskip('timm')
  from test_timm_hub import save_hub_folder  # noqa: PLC0415  # Needs torch and timm.
  from test_timm_hub import timm_model  # noqa: PLC0415
  hub = save_hub_folder(timm_model('augreg'), tmp_path / 'hub')
  data = write_animals(str(tmp_path / 'data'))
  config = folder_config(data, 4, pretrained_path=hub)
  config.model = None  # configs/hub.py: the model is the checkpoint's.
  workdir = str(tmp_path / 'run')
  train_until_first_checkpoint(config, workdir)
  os.rename(hub, str(tmp_path / 'hub_moved'))
  result = train.train_and_evaluate(config, workdir)  # Before: "... gs://vit_models ...".
  assert result['step'] == 4
  with open(os.path.join(workdir, 'metadata.json')) as f:
    assert json.load(f)['model']['hidden_size'] == 32
  with open(os.path.join(workdir, 'run.json')) as f:
    record = json.load(f)
  assert record['pretrained']['source'] == hub
  assert record['pretrained']['contributed'][:2] == ['weights', 'model']
  assert record['pretrained']['resolution'] == 32


def test_continuing_anyway_names_the_same_run_directory():
  """The way on that the refusal names must reach the refused run, not start a new one."""
  from vit_jax import main  # noqa: PLC0415
  plain = main.default_workdir('config.py', {'batch': 8})
  assert main.default_workdir('config.py', {'batch': 8, 'allow_changed_inputs': True}) == plain
  assert main.default_workdir('q.py', {'finetune.allow_changed_inputs': True}) == (
      main.default_workdir('q.py', {}))


def test_a_refused_run_writes_nothing(tmp_path):
  """Issue 62: batch 9 on 2 devices left a run directory with train.log and an empty
  train_state/; in an existing run directory it appended to train.log."""
  data = write_animals(str(tmp_path / 'data'))
  (tmp_path / 'config.py').write_text(
      CONFIG_FILE.format(dataset=data, steps=2).replace('batch=8', 'batch=9'))
  existing = tmp_path / 'existing'
  existing.mkdir()
  (existing / 'train.log').write_text('a line of an earlier run\n')
  (existing / 'notes.txt').write_text('kept\n')
  before = snapshot(existing)
  env = dict(os.environ, JAX_PLATFORMS='cpu',
             XLA_FLAGS=forked.xla_flags(2))
  env.pop('JAX_NUM_CPU_DEVICES', None)
  for workdir in (tmp_path / 'new', existing):
    proc = forked.run(['-m', 'vit_jax.main', '--config=config.py', f'--workdir={workdir}'],
                      cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert error_lines(proc) == ['error: batch=9 is not divisible by 2 devices x 1 accum_steps '
                                 '(= 2); choose a multiple of 2.'], proc.stderr[-3000:]
    assert 'Traceback' not in proc.stderr and 'details in' not in proc.stderr
  assert not os.path.exists(tmp_path / 'new')
  assert snapshot(existing) == before and sorted(os.listdir(existing)) == ['notes.txt',
                                                                          'train.log']


def test_a_run_refused_by_the_library_call_leaves_no_directory(tmp_path):
  """`train.train_and_evaluate` itself (not only `python -m vit_jax.main`): a config refused by
  the trainer's checks leaves no empty run directory or train_state/ behind (issue 62)."""
  data = write_animals(str(tmp_path / 'data'))
  config = config_lib.with_model(config_lib.get_config(), 'testing')
  config.update(dict(dataset=data, batch=9, batch_eval=4, total_steps=2, pretrained_dir=''))
  config.pp.update(dict(train='train', test='test', crop=32))
  for workdir in (tmp_path / 'new', tmp_path / 'new' / 'nested'):
    with pytest.raises(ValueError, match='batch=9 is not divisible'):
      train.train_and_evaluate(config, str(workdir))
    assert not os.path.exists(tmp_path / 'new')
  existing = tmp_path / 'existing'
  existing.mkdir()
  with pytest.raises(ValueError, match='batch=9 is not divisible'):
    train.train_and_evaluate(config, str(existing))
  assert os.listdir(existing) == []  # Kept: it was there before.


def test_a_field_added_to_the_code_after_a_run_was_recorded_changes_nothing_at_its_default():
  config = config_lib.get_config()
  recorded = json.loads(json.dumps(run_record._plain(config)))
  del recorded['pp']['uint8_batches']  # A record written before the field existed.
  record = {'dataset': {}, 'config': recorded}
  assert run_record.differences(record, config, {}) == []
  config.pp.uint8_batches = True
  assert run_record.differences(record, config, {}) == [
      'config pp.uint8_batches is True (was None)']
