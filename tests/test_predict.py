"""Tests for the predict CLI (in process, plus one real subprocess for exit code and stderr)."""

import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

from test_features import write_checkpoint, write_images
from vit_jax import features
from vit_jax import predict


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
  root = tmp_path_factory.mktemp('predict')
  ckpt = root / 'testing.npz'
  write_checkpoint(ckpt, num_classes=10)
  images = write_images(root / 'images')
  return str(ckpt), str(root / 'images'), images


def _run(capsys, *args):
  rc = predict.main(['predict', *args])
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
  loaded = features.load_model(ckpt, 'testing')
  logits = loaded.model.apply({'params': loaded.params},
                              features.load_images(images, 32), train=False)
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
    ('mismatch', 'does not fit the model'),
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
