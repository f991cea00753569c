"""The study runner: commands, skip/rerun of runs, tables from run directories, image folders."""

import json
import os
import re
import sys

import numpy as np
import pytest

from test_fashion_mnist import write_idx_gz
from vit_jax import fashion_mnist
from vit_jax import study

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUDY_GRID = os.path.join(ROOT, 'configs', 'study_fashion_mnist.py')

# Stands in for `python -m vit_jax.main`: counts its calls in the workdir and exports (writes
# params.npz + metadata.json with the accuracy given) only from the call number given on.
FAKE_TRAINER = '''
import json, os, sys
accuracy, finish_on_call = float(sys.argv[1]), int(sys.argv[2])
workdir = sys.argv[-1].split('=', 1)[1]
os.makedirs(workdir, exist_ok=True)
with open(os.path.join(workdir, 'calls'), 'a') as f:
  f.write('x')
calls = len(open(os.path.join(workdir, 'calls')).read())
if calls < finish_on_call:
  sys.exit(3)
open(os.path.join(workdir, 'params.npz'), 'w').close()
json.dump({'accuracy': accuracy, 'num_examples': 100},
          open(os.path.join(workdir, 'metadata.json'), 'w'))
'''


@pytest.fixture
def fake_trainer(tmp_path):
  path = tmp_path / 'fake_trainer.py'
  path.write_text(FAKE_TRAINER)
  return str(path)


def calls(out, name):
  return len((out / name / 'calls').read_text())


def test_command_argv_fills_out_python_and_workdir():
  run = study.Run('b', 'python -m vit_jax.main --config=c.py:x=1 --config.p={out}/a/params.npz')
  assert study.command_argv(run, 'runs/s', python='/py') == [
      '/py', '-m', 'vit_jax.main', '--config=c.py:x=1', '--config.p=runs/s/a/params.npz',
      '--workdir=runs/s/b']


def test_runner_skips_finished_runs_and_reruns_unfinished_ones(tmp_path, fake_trainer):
  out = tmp_path / 'out'
  grid = study.Grid(runs=[study.Run('a', f'python {fake_trainer} 0.5 1'),
                          study.Run('b', f'python {fake_trainer} 0.7 2')])
  assert study.run_grid(grid, str(out), log=lambda _: None) == ['b']  # b stops before exporting.
  assert study.read_result(str(out / 'b')).accuracy is None
  assert study.run_grid(grid, str(out), log=lambda _: None) == []
  assert (calls(out, 'a'), calls(out, 'b')) == (1, 2)  # a was skipped, b continued.
  state = json.loads((out / 'b' / study.STATE_FILE).read_text())
  assert [a['returncode'] for a in state['attempts']] == [3, 0]
  assert state['command'].startswith(sys.executable) and state['command'].endswith(
      f'--workdir={out / "b"}')
  result = study.read_result(str(out / 'b'))
  assert result.accuracy == 0.7 and result.attempts == 2
  assert result.wall_s == pytest.approx(sum(a['wall_s'] for a in state['attempts']))


def fake_run_dir(out, name, accuracy):
  os.makedirs(out / name)
  (out / name / 'params.npz').write_bytes(b'')
  (out / name / 'metadata.json').write_text(json.dumps({'accuracy': accuracy,
                                                        'num_examples': 10_000}))


def test_report_tables_average_seeds_and_name_their_runs(tmp_path):
  out = tmp_path / 'out'
  runs = [study.Run(f'{m}_p{p}_s{s}', f'python -m vit_jax.main --config=c.py:{m},{p},{s}',
                    dict(model=m, pct=p, seed=s)) for m in ('vit', 'cnn') for p in (1, 100)
          for s in (0, 1)]
  accuracies = {'vit_p1_s0': .60, 'vit_p1_s1': .62, 'vit_p100_s0': .80, 'vit_p100_s1': .84,
                'cnn_p1_s0': .70, 'cnn_p1_s1': .70, 'cnn_p100_s0': .86}  # cnn_p100_s1 unfinished.
  for name, accuracy in accuracies.items():
    fake_run_dir(out, name, accuracy)
  grid = study.Grid(runs=runs, tables=[study.Table('size', 'Size', row='model', col='pct',
                                                   col_label='% ', log_x=True)])
  doc = tmp_path / 'doc.md'
  doc.write_text(f'intro\n{study.DOC_BEGIN}\nold\n{study.DOC_END}\noutro\n')
  text = study.report_markdown(grid, str(out), str(tmp_path / 'figs'), 'figs')
  study.write_into_doc(str(doc), text)
  lines = text.splitlines()
  assert '| model | % 1 | % 100 |' in lines
  assert ('| vit | 61.00 ± 1.41 <sub>vit_p1_s0 vit_p1_s1</sub> | '
          '82.00 ± 2.83 <sub>vit_p100_s0 vit_p100_s1</sub> |') in lines
  assert ('| cnn | 70.00 ± 0.00 <sub>cnn_p1_s0 cnn_p1_s1</sub> | '
          '86.00 (1 unfinished) <sub>cnn_p100_s0 cnn_p100_s1</sub> |') in lines
  assert '7 of 8 runs finished' in text and '![Size](figs/size.png)' in text
  assert f'| {out}/cnn_p100_s1 | unfinished |' in text
  assert '`python -m vit_jax.main --config=c.py:vit,1,0` |' in text
  assert (tmp_path / 'figs' / 'size.png').stat().st_size > 1000
  content = doc.read_text()
  assert content.startswith('intro\n') and content.endswith('outro\n') and 'old' not in content


def test_study_grid_lists_dependencies_before_their_users():
  for arg in ('', 'runlocal', 'seeds=1,steps=50'):
    grid = study.load_grid(f'{STUDY_GRID}:{arg}')
    seen = set()
    for run in grid.runs:
      for dependency in re.findall(r'\{out\}/([\w.+-]+)/params\.npz', run.command):
        assert dependency in seen, f'{run.name} uses {dependency} before it runs'
      seen.add(run.name)
    for table in grid.tables if arg != 'runlocal' else ():  # Every table has cells.
      assert study.table_cells(table, grid.runs, {})[2], (arg, table.name)


def write_idx(folder, counts):
  rng = np.random.default_rng(0)
  for split, n in counts.items():
    image_file, label_file = fashion_mnist.FILENAMES[split]
    write_idx_gz(str(folder / image_file), rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
    write_idx_gz(str(folder / label_file), np.arange(n) % 10)


def test_prepare_folders_writes_classes_in_label_order_and_linked_subsets(tmp_path):
  write_idx(tmp_path, {'train': 40, 'test': 20})
  root = tmp_path / 'folders'
  study.prepare_folders(str(root), limit=3, source_dir=str(tmp_path), log=lambda _: None)
  classes = sorted(os.listdir(root / 'fashion_mnist' / 'train'))
  assert classes[0] == '0_t_shirt_top' and classes[9] == '9_ankle_boot'
  assert len(os.listdir(root / 'fashion_mnist' / 'train' / '4_coat')) == 3  # limit
  assert sorted(os.listdir(root / 'fashion_mnist' / 'test' / '4_coat')) == ['00004.png',
                                                                           '00014.png']
  assert sorted(os.listdir(root / 'fashion_mnist_5-9' / 'test')) == classes[5:]
  assert os.listdir(root / 'fashion_mnist_0-4' / 'train' / '0_t_shirt_top') == os.listdir(
      root / 'fashion_mnist' / 'train' / '0_t_shirt_top')
  os.remove(root / 'fashion_mnist' / 'test' / '4_coat' / '00004.png')
  study.prepare_folders(str(root), source_dir=str(tmp_path), log=lambda _: None)
  assert not os.path.exists(root / 'fashion_mnist' / 'test' / '4_coat' / '00004.png')  # Once.


def test_a_runlocal_study_run_trains_and_reports(tmp_path, monkeypatch):
  write_idx(tmp_path, {'train': 80, 'test': 20})
  monkeypatch.setenv(fashion_mnist.SOURCE_DIR_ENV, str(tmp_path))
  monkeypatch.chdir(ROOT)  # The grid's commands name configs/ relative to the repository.
  out = tmp_path / 'out'
  grid = study.load_grid(f'{STUDY_GRID}:runlocal')
  grid = study.Grid(runs=grid.runs[:1], tables=grid.tables[:1], folders=grid.folders,
                    folder_limit=grid.folder_limit)
  assert study.run_grid(grid, str(out), log=lambda _: None) == []
  text = study.report_markdown(grid, str(out), str(tmp_path / 'report'), '.')
  result = study.read_result(str(out / grid.runs[0].name))
  assert result.num_examples == 20 and f'{100 * result.accuracy:.2f}' in text
