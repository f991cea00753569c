"""notebooks/vit_jax.ipynb runs from top to bottom, and its committed copy reads on GitHub.

The notebook is executed with nbclient in a fresh kernel after its "parameters" cell is
replaced (as papermill does) so that it loads a tiny published-format checkpoint, writes its
image folder from tiny Fashion-MNIST idx files and fine-tunes 2 steps: every cell of the
user's path runs (load, predict, rollout, folder, train_and_evaluate, predict again).
"""

import json
import os
import warnings

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

import npz_fixtures
from test_fashion_mnist import write_idx_gz
from vit_jax.data import fashion_mnist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, 'notebooks', 'vit_jax.ipynb')
GROUPS = ('bag', 'footwear', 'trouser_or_dress', 'upper_body')


def read_notebook():
  with open(NOTEBOOK) as f:
    return nbformat.read(f, as_version=4)


def parameters_cell(notebook):
  cells = [c for c in notebook.cells if 'parameters' in c.metadata.get('tags', ())]
  assert len(cells) == 1, 'the notebook needs exactly one cell tagged "parameters"'
  return cells[0]


def write_idx_files(folder):
  """Fashion-MNIST idx files with 60 train / 30 test random images, labels cycling 0-9."""
  os.makedirs(folder)
  rng = np.random.default_rng(0)
  for split, n in (('train', 60), ('test', 30)):
    image_file, label_file = fashion_mnist.FILENAMES[split]
    write_idx_gz(os.path.join(folder, image_file), rng.integers(0, 256, (n, 28, 28)))
    write_idx_gz(os.path.join(folder, label_file), np.arange(n) % 10)


def outputs_text(cell):
  return ''.join(o.get('text', '') + ''.join(o.get('data', {}).get('text/plain', ''))
                 for o in cell.get('outputs', ()))


@pytest.fixture(scope='module')
def executed(tmp_path_factory):
  """The notebook executed on a 10-class ViT (hidden 16, 28px) and a tiny folder."""
  tmp = tmp_path_factory.mktemp('notebook')
  published, _ = npz_fixtures.published_vit(hidden=16, mlp=32, heads=2, layers=1, patch=7,
                                            num_tokens=17, num_classes=10)
  npz = npz_fixtures.write_npz(tmp / 'tiny.npz', published)
  write_idx_files(str(tmp / 'idx'))
  notebook = read_notebook()
  parameters_cell(notebook).source = '\n'.join([
      f'checkpoint_path = {npz!r}',
      f'image_folder = {str(tmp / "folder")!r}',
      'images_per_class = (4, 2)',
      f'workdir = {str(tmp / "run")!r}',
      'finetune_steps = 2',
      'batch = 8',
  ])
  env = {'FASHION_MNIST_DIR': str(tmp / 'idx'), 'JAX_PLATFORMS': 'cpu',
         'JAX_DISABLE_MOST_OPTIMIZATIONS': '1', 'VIT_JAX_HUGEPAGES': '0'}
  saved = {k: os.environ.get(k) for k in env}
  os.environ.update(env)  # The kernel inherits the environment of this process.
  try:
    NotebookClient(notebook, timeout=300, kernel_name='python3',
                   resources={'metadata': {'path': os.path.dirname(NOTEBOOK)}}).execute()
  finally:
    for k, v in saved.items():
      if v is None:
        os.environ.pop(k, None)
      else:
        os.environ[k] = v
  return notebook, tmp


def test_notebook_runs_the_users_path(executed):
  """Every code cell ran; the fine-tuned run exists with the folder's classes and predicts."""
  notebook, tmp = executed
  code = [c for c in notebook.cells if c.cell_type == 'code']
  assert all(c.execution_count for c in code)
  assert not [o for c in code for o in c.outputs if o.output_type == 'error']
  for split, count in (('train', 4), ('test', 2)):
    for group in GROUPS:
      assert len(os.listdir(tmp / 'folder' / split / group)) == count
  with open(tmp / 'run' / 'metadata.json') as f:
    assert json.load(f)['class_names'] == list(GROUPS)
  text = '\n'.join(outputs_text(c) for c in code)
  assert 'final: ' in text and 'of 8 test images' in text
  assert f"4 classes: {tuple(GROUPS)}" in text
  images = [o for c in code for o in c.outputs if 'image/png' in o.get('data', {})]
  assert len(images) >= 5  # Predictions before/after, rollouts before/after, the loss curve.


def test_committed_notebook_has_real_outputs():
  """The committed copy was executed in order, without errors, so it reads on GitHub."""
  notebook = read_notebook()
  parameters_cell(notebook)
  code = [c for c in notebook.cells if c.cell_type == 'code']
  counts = [c.execution_count for c in code]
  assert counts == list(range(1, len(code) + 1)), counts
  assert not [o for c in code for o in c.outputs if o.output_type == 'error']
  assert any('image/png' in o.get('data', {}) for c in code for o in c.outputs)
  assert 'final: ' in '\n'.join(outputs_text(c) for c in code)


def test_training_curves_leave_the_plotting_backend_alone(tmp_path):
  """train_and_evaluate draws curves.png; a notebook's plots after it must still show."""
  import matplotlib
  from vit_jax.training import plotting
  previous = matplotlib.get_backend()
  matplotlib.use('svg')
  try:
    plotting.append_history(str(tmp_path / 'metrics.jsonl'), 1, {'train_loss': 1.})
    with warnings.catch_warnings():  # The empty accuracy panel gets no legend (and no warning).
      warnings.simplefilter('error')
      plotting.plot_curves(str(tmp_path / 'metrics.jsonl'), str(tmp_path / 'curves.png'))
    assert matplotlib.get_backend() == 'svg'
    assert (tmp_path / 'curves.png').stat().st_size > 0
  finally:
    matplotlib.use(previous)
