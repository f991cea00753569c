"""Tests for the predict CLI (in process, plus one real subprocess for exit code and stderr)."""

import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
from absl import logging as absl_logging

from test_features import write_checkpoint, write_images
from vit_jax import config_lib
from vit_jax.data import folder_source
from vit_jax.data import image_ops
from vit_jax.tools import cli
from vit_jax.tools import predict
from vit_jax.weights import loading


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
  root = tmp_path_factory.mktemp('predict')
  ckpt = root / 'testing.npz'
  write_checkpoint(ckpt, num_classes=10)
  images = write_images(root / 'images')
  return str(ckpt), str(root / 'images'), images


def _run(capsys, *args):
  rc = cli.call(predict, ['predict', *args])
  out, err = capsys.readouterr()
  return rc, out, err


@pytest.mark.parametrize('name, size, first, last', [
    ('imagenet1k', 1000, 'tench, Tinca tinca', 'toilet tissue, toilet paper, bathroom tissue'),
    ('imagenet21k', 21843, 'organism, being', None),
    ('cifar10', 10, 'airplane', 'truck'),
    ('cifar100', 100, 'apple', 'worm'),
    ('fashion_mnist', 10, 'T-shirt/top', 'Ankle boot'),
])
def test_shipped_label_sets(name, size, first, last):
  labels = predict.load_labels(name, size)
  assert len(labels) == size and labels[0] == first
  assert last is None or labels[-1] == last


def test_labels_default_file_and_errors(tmp_path):
  assert predict.load_labels(None, 1000)[0] == 'tench, Tinca tinca'
  assert predict.load_labels(None, 10) == [f'class {i}' for i in range(10)]  # Ambiguous.
  names = tmp_path / 'names.txt'
  names.write_text('cat\ndog\n\n')
  assert predict.load_labels(str(names), 2) == ['cat', 'dog']
  with pytest.raises(ValueError, match='has 2 names but the checkpoint head has 3'):
    predict.load_labels(str(names), 3)
  with pytest.raises(ValueError, match='Unknown --labels'):
    predict.load_labels('imagenet99', 3)


def test_top_k():
  idx, probs = predict.top_k(np.array([[0., 2., 1.], [5., 5., -1.]]), 2)
  np.testing.assert_array_equal(idx, [[1, 2], [0, 1]])
  np.testing.assert_allclose(probs[0], np.exp([2., 1.]) / np.exp([0., 2., 1.]).sum())
  assert predict.top_k(np.zeros((1, 3)), 10)[0].shape == (1, 3)


def test_text_output_matches_the_model(setup, capsys):
  ckpt, folder, images = setup
  rc, out, _ = _run(capsys, f'--checkpoint={ckpt}', '--model=testing', '--labels=cifar10',
                    '--top_k=3', folder)
  assert rc == 0
  lines = out.splitlines()
  assert lines[::4] == images  # Sorted folder listing, 1 path line + 3 label lines each.
  loaded = loading.load_model(ckpt, 'testing')
  logits = loaded.model.apply({'params': loaded.params},
                              image_ops.load_images(images, 32), train=False)
  best = predict.load_labels('cifar10', 10)[int(np.argmax(logits[0]))]
  assert lines[1].endswith(best)


def test_json_output_and_batching_agree(setup, capsys):
  ckpt, folder, images = setup
  runs = []
  for batch in ('--batch_size=3', '--batch_size=16'):
    rc, out, _ = _run(capsys, f'--checkpoint={ckpt}', '--model=testing', '--json', batch,
                      folder)
    assert rc == 0
    runs.append(json.loads(out))
  a, b = runs
  assert [r['image'] for r in a['results']] == images and a['image_size'] == 32
  for ra, rb in zip(a['results'], b['results']):
    assert [p['index'] for p in ra['predictions']] == [p['index'] for p in rb['predictions']]
    np.testing.assert_allclose([p['probability'] for p in ra['predictions']],
                               [p['probability'] for p in rb['predictions']], rtol=1e-5)
    assert len(ra['predictions']) == 5
    assert sum(p['probability'] for p in ra['predictions']) <= 1 + 1e-6


def test_zero_head_warns(tmp_path, setup, capsys, caplog):
  ckpt = tmp_path / 'pretrain.npz'
  write_checkpoint(ckpt, num_classes=10, zero_head=True)
  with caplog.at_level(logging.WARNING):
    rc, out, _ = _run(capsys, f'--checkpoint={ckpt}', '--model=testing', setup[2][0])
  assert rc == 0 and 'meaningless' in caplog.text
  assert '10.00%' in out  # Uniform over 10 classes.


@pytest.mark.parametrize('case, message', [
    ('bad_image', 'Could not read image'),
    ('missing_image', 'Could not find image'),
    ('unknown_model', 'Unknown model'),
    ('mismatch', 'hidden size 10 in the file, 192 in ViT-Ti_16; drop --model'),
    ('missing_checkpoint', 'Could not find checkpoint'),
    ('no_images', 'No images given'),
    ('bad_flag', 'Unknown command line flag'),
])
def test_bad_input_is_one_line_and_exit_1(case, message, setup, tmp_path, capsys):
  ckpt, _, images = setup
  bad = tmp_path / 'bad.jpg'
  bad.write_bytes(b'\xff\xd8\xff\xe0 truncated jpeg')
  args = {'bad_image': [f'--checkpoint={ckpt}', '--model=testing', str(bad)],
          'missing_image': [f'--checkpoint={ckpt}', '--model=testing', 'nope.png'],
          'unknown_model': [f'--checkpoint={ckpt}', '--model=ViT-Z_1', images[0]],
          'mismatch': [f'--checkpoint={ckpt}', '--model=ViT-Ti_16', images[0]],
          'missing_checkpoint': [f'--checkpoint={tmp_path}/x.npz', '--model=testing', images[0]],
          'no_images': [f'--checkpoint={ckpt}', '--model=testing'],
          'bad_flag': ['--colour=blue']}[case]
  rc, out, err = _run(capsys, *args)
  assert rc == 1 and out == ''
  assert err.startswith('predict: error: ') and message in err
  assert len(err.strip().splitlines()) == 1 and 'Traceback' not in err


@pytest.mark.parametrize('output', ['json', 'text'])
def test_an_unreadable_file_is_an_error_line_and_the_others_are_predicted(
    output, setup, tmp_path, capsys):
  """One bad file among good ones: each good file's predictions, an entry (JSON) and one
  stderr line naming the bad one, exit status 1."""
  ckpt, _, images = setup
  bad = tmp_path / 'bad.png'
  bad.write_bytes(b'\x89PNG\r\n\x1a\n not really')
  paths = [images[0], str(bad), images[1]]
  args = ['--json'] * (output == 'json')
  rc, out, err = _run(capsys, f'--checkpoint={ckpt}', '--model=testing', '--batch_size=2',
                      *args, *paths)
  assert rc == 1 and 'Traceback' not in err
  [line] = err.strip().splitlines()
  assert line.startswith('predict: error: Could not read image') and str(bad) in line
  _, alone, _ = _run(capsys, f'--checkpoint={ckpt}', '--model=testing', '--json', images[1])
  if output == 'json':
    results = json.loads(out)['results']
    assert [r['image'] for r in results] == paths
    assert results[1] == {'image': str(bad), 'error': line[len('predict: error: '):]}
    want = json.loads(alone)['results'][0]['predictions']  # As when predicted alone.
    assert [p['label'] for p in results[2]['predictions']] == [p['label'] for p in want]
    np.testing.assert_allclose([p['probability'] for p in results[2]['predictions']],
                               [p['probability'] for p in want], atol=1e-6)
  else:
    assert [line for line in out.splitlines() if not line.startswith(' ')] == [images[0],
                                                                               images[1]]


def test_command_line_exit_status_and_stderr(setup, tmp_path):
  ckpt, _, _ = setup
  text = tmp_path / 'x.png'
  text.write_text('hello')
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  proc = subprocess.run([sys.executable, '-m', 'vit_jax.predict', f'--checkpoint={ckpt}',
                         '--model=testing', str(text)], capture_output=True, text=True, env=env,
                        timeout=120)
  assert proc.returncode == 1 and proc.stdout == ''
  assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
  assert 'Could not read image' in proc.stderr and 'Traceback' not in proc.stderr


def test_predictions_agree_with_the_eval_pipeline(setup, tmp_path, capsys):
  """predict on image files = `input_pipeline.get_eval_data` + `model.apply` on the same files."""
  from PIL import Image
  from vit_jax import input_pipeline
  from vit_jax.training import settings
  ckpt, _, _ = setup
  rng = np.random.default_rng(1)
  files = []
  for split in ('train', 'test'):
    for c, (mode, ext, shape) in enumerate((('RGB', 'jpg', (40, 50, 3)), ('L', 'png', (64, 30)),
                                            ('RGBA', 'png', (33, 33, 4)))):
      folder = tmp_path / 'data' / split / f'class{c}'
      folder.mkdir(parents=True)
      for i in range(2):
        path = folder / f'{i}.{ext}'
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(path)
        files += [str(path)] if split == 'test' else []
  config = config_lib.get_config()
  config.update(dict(dataset=str(tmp_path / 'data'), batch_eval=4,
                     pp=dict(train='train', test='test', crop=32)))
  loaded = loading.load_model(ckpt, 'testing')
  logits = np.concatenate([
      np.asarray(loaded.model.apply({'params': loaded.params}, b['image'], train=False))[
          b['mask'] > 0] for b in input_pipeline.get_eval_data(settings.data(config)).batches()])
  rc, out, _ = _run(capsys, f'--checkpoint={ckpt}', '--model=testing', '--json', '--top_k=10',
                    str(tmp_path / 'data' / 'test'))
  assert rc == 0
  results = json.loads(out)['results']
  assert [r['image'] for r in results] == files and len(logits) == len(files) == 6
  # The eval pipeline reads a folder in its own fixed (class-interleaved) order.
  eval_order, _ = folder_source.folder_split(str(tmp_path / 'data'),
                                             ('class0', 'class1', 'class2'), 'test')
  logits = np.stack([dict(zip(map(str, eval_order), logits))[f] for f in files])
  want_idx, want_p = predict.top_k(logits, 10)
  for r, idx, p in zip(results, want_idx, want_p):
    assert r['predictions'][0]['index'] == idx[0]  # Same top-1 and the same probabilities.
    np.testing.assert_allclose([x['probability'] for x in r['predictions']], p, atol=1e-5)


def test_model_outside_the_presets_from_a_py_file(tmp_path, setup, capsys):
  from vit_jax import config_lib
  cfg = config_lib.small_vit('ViT-tiny_8', patch=8, hidden=16, layers=1, mlp=32, heads=2)
  ckpt = tmp_path / 'params.npz'
  write_checkpoint(ckpt, num_classes=10, image_size=24, model=cfg)
  model_py = tmp_path / 'tiny.py'
  model_py.write_text('from vit_jax import config_lib\n\n\ndef get_config():\n  return '
                      "config_lib.small_vit('ViT-tiny_8', patch=8, hidden=16, layers=1, mlp=32, "
                      'heads=2)\n')
  loaded = loading.load_model(str(ckpt), str(model_py))
  assert loaded.image_size == 24 and loaded.config.model_name == 'ViT-tiny_8'
  rc, out, _ = _run(capsys, f'--checkpoint={ckpt}', f'--model={model_py}', '--json',
                    '--labels=fashion_mnist', setup[2][0])
  assert rc == 0 and json.loads(out)['image_size'] == 24
  logits = loaded.model.apply({'params': loaded.params},
                              image_ops.load_images(setup[2][:1], 24), train=False)
  assert json.loads(out)['results'][0]['predictions'][0]['index'] == int(np.argmax(logits[0]))
  # An experiment config (with .model) works too; a broken or wrong file is one clear line.
  exp_py = tmp_path / 'exp.py'
  exp_py.write_text(model_py.read_text().replace(
      'def get_config():\n  return ', 'def get_config():\n  c = config_lib.get_config()\n'
      '  c.model = ') + '  return c\n')
  assert loading.load_model(str(ckpt), str(exp_py)).config.hidden_size == 16
  (tmp_path / 'broken.py').write_text('def get_config():\n  raise KeyError("x")\n')
  (tmp_path / 'wrong.py').write_text('def get_config():\n  return {"a": 1}\n')
  for name, message in (('missing.py', 'Could not find model config file'),
                        ('broken.py', 'get_config() failed: KeyError'),
                        ('wrong.py', 'must return a model ConfigDict')):
    rc, out, err = _run(capsys, f'--checkpoint={ckpt}', f'--model={tmp_path / name}',
                        setup[2][0])
    assert rc == 1 and message in err and len(err.strip().splitlines()) == 1


def test_running_a_tool_in_process_leaves_logging_alone(tmp_path, caplog):
  """`cli.call` resets only the tool's flags: resetting absl's --verbosity too pinned the absl
  logger at WARNING, so later INFO lines (a training run's) were lost."""
  level = absl_logging.get_absl_logger().level
  assert cli.call(predict, ['predict', f'--checkpoint={tmp_path}/missing.npz', 'x.png']) == 1
  assert absl_logging.get_absl_logger().level == level
  with caplog.at_level('INFO'):
    absl_logging.info('still heard')
  assert 'still heard' in caplog.text
