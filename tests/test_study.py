"""The study runner: commands, skip/rerun of runs, tables from run directories, image folders."""

import collections
import contextlib
import dataclasses
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
from typing import List, Tuple

import numpy as np
import pytest
from PIL import Image

import forked
from research.small_data import cells as cells_lib
from research.small_data import claim_history
from research.small_data import fashion_mnist_round3
from research.small_data import fashion_mnist_round4
from research.small_data import folders
from research.small_data import full_recipe_epochs
from research.small_data import grid as grid_lib
from research.small_data import plots
from research.small_data import records
from research.small_data import report
from research.small_data import round3_estimate
from research.small_data import round4_estimate
from research.small_data import runner
from research.small_data import select
from test_fashion_mnist import write_idx_gz
from vit_jax.data import fashion_mnist
from vit_jax.tools import flops
from vit_jax import config_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUDY_CONFIG_FILE = os.path.join(ROOT, 'configs', 'study_fashion_mnist.py')
STUDY_GRID = os.path.join(ROOT, 'research', 'small_data', 'fashion_mnist_grid.py')

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
json.dump({'accuracy': accuracy, 'num_examples': 100, 'step': 10, 'batch': 2, 'model': {},
           'image_size': 28, 'num_classes': 10}, open(os.path.join(workdir, 'metadata.json'), 'w'))
'''


@pytest.fixture
def fake_trainer(tmp_path):
  path = tmp_path / 'fake_trainer.py'
  path.write_text(FAKE_TRAINER)
  return str(path)


def calls(out, name):
  return len((out / name / 'calls').read_text())


def test_an_attempt_killed_with_its_runner_still_counts_its_time(tmp_path):
  """A session that ends kills the runner before it can record the attempt: the next attempt
  times it to the last file it wrote, and the run's wall time is the sum of both."""
  workdir = tmp_path / 'run'
  workdir.mkdir()
  records.begin_attempt(str(workdir), 'cmd')
  started = json.loads((workdir / records.STATE_FILE).read_text())['attempts'][0]['started_s']
  (workdir / 'study.log').write_text('step 4400')
  os.utime(workdir / 'study.log', (started + 3000, started + 3000))  # Killed after 50 min.
  records.begin_attempt(str(workdir), 'cmd')  # The rerun.
  records.end_attempt(str(workdir), 500., 0)
  first, second = json.loads((workdir / records.STATE_FILE).read_text())['attempts']
  assert abs(first['wall_s'] - 3000) < 1 and first['returncode'] is None
  assert first['ended'].startswith('killed') and second['wall_s'] == 500
  record = records.run_record(grid_lib.Run('run', 'python x.py'), str(tmp_path))
  assert record['attempts'] == 2 and abs(record['wall_s'] - 3500) < 1


def test_command_argv_fills_out_python_and_workdir():
  run = grid_lib.Run('b', 'python -m vit_jax.main --config=c.py:x=1 --config.p={out}/a/params.npz')
  assert grid_lib.command_argv(run, 'runs/s', python='/py') == [
      '/py', '-m', 'vit_jax.main', '--config=c.py:x=1', '--config.p=runs/s/a/params.npz',
      '--workdir=runs/s/b']


def test_runner_skips_finished_runs_and_reruns_unfinished_ones(tmp_path, fake_trainer):
  out = tmp_path / 'out'
  grid = grid_lib.Grid(runs=[grid_lib.Run('a', f'python {fake_trainer} 0.5 1'),
                          grid_lib.Run('b', f'python {fake_trainer} 0.7 2')])
  assert runner.run_grid(grid, str(out), log=lambda _: None) == ['b']  # b stops before exporting.
  assert not records.is_finished(str(out / 'b'))
  assert runner.run_grid(grid, str(out), log=lambda _: None) == []
  assert (calls(out, 'a'), calls(out, 'b')) == (1, 2)  # a was skipped, b continued.
  state = json.loads((out / 'b' / records.STATE_FILE).read_text())
  assert [a['returncode'] for a in state['attempts']] == [3, 0]
  assert state['command'].startswith(sys.executable) and state['command'].endswith(
      f'--workdir={out / "b"}')
  assert records.is_finished(str(out / 'b'))


def test_runs_finished_elsewhere_are_skipped_unless_a_run_to_do_needs_their_params(
    tmp_path, fake_trainer, monkeypatch):
  """A committed results file resumes the grid on a fresh machine: finished runs are not made
  again, except a teacher whose params.npz a run still to do reads (made again, same command)."""
  monkeypatch.setattr(records, 'forward_flops', lambda meta: (1e6, 'test'))
  teacher = f'python {fake_trainer} 0.9 1'
  grid = grid_lib.Grid(runs=[
      grid_lib.Run('teacher', teacher), grid_lib.Run('other', f'python {fake_trainer} 0.5 1'),
      grid_lib.Run('done_student', f'python {fake_trainer} 0.6 1 --t={{out}}/teacher/params.npz'),
      grid_lib.Run('new_student', f'python {fake_trainer} 0.7 1 --t={{out}}/teacher/params.npz'),
      grid_lib.Run('changed', f'python {fake_trainer} 0.8 1')])
  results = tmp_path / 'results.jsonl'
  first = tmp_path / 'first_machine'
  assert runner.run_grid(grid, str(first), log=lambda _: None, results=str(results)) == []
  out = tmp_path / 'second_machine'
  lines = records.read_results(str(results))  # As committed: commands name the first machine's out.
  for record in lines.values():
    record['command'] = record['command'].replace(str(first), str(out))
  del lines['new_student']  # Not run there yet.
  lines['changed']['command'] += ' --config.steps=5'  # Its command changed since: run again.
  results.write_text(''.join(json.dumps(r) + '\n' for r in lines.values()))
  assert [r.name for r in runner.runs_to_do(grid, str(out), lines)] == [
      'changed', 'teacher', 'new_student']  # The teacher made again just before its reader.
  logged = []
  assert runner.run_grid(grid, str(out), log=logged.append, results=str(results)) == []
  assert sorted(os.listdir(out)) == ['changed', 'new_student', 'teacher']
  assert f'[2/5] other: finished (in {results}), skipped' in logged
  final = records.read_results(str(results))
  assert all(r['finished'] for r in final.values()) and len(final) == 5
  assert final['new_student']['accuracy_test'] == 0.7
  shutil.rmtree(out)  # Once all are finished, a fresh machine (same --out) runs nothing.
  assert runner.runs_to_do(grid, str(out), final) == []


def test_a_teacher_made_again_waits_for_the_first_run_that_reads_it(tmp_path):
  """On a fresh machine the runs that can start at once go first; each teacher finished only in
  the results file is made again right before the first run that reads it, not all up front."""
  out = tmp_path / 'out'
  reads = lambda t: f' --t={{out}}/{t}/params.npz'
  runs = [grid_lib.Run(f't{s}', f'python t.py {s}') for s in range(3)] + [
          grid_lib.Run('sweep_a', 'python s.py a' + reads('t0')),
          grid_lib.Run('sweep_b', 'python s.py b' + reads('t0')),
          grid_lib.Run('seed1', 'python s.py 1' + reads('t1')),
          grid_lib.Run('seed2', 'python s.py 2' + reads('t2')),
          grid_lib.Run('fair', 'python f.py' + reads('t0'))]
  grid = grid_lib.Grid(runs=runs)
  done = dict(t0=True, t1=True, t2=True, sweep_a=True)
  results = {r.name: dict(name=r.name, finished=True, command=records.record_command(r, str(out)))
             for r in runs if done.get(r.name)}
  fake_run_dir(out, 't0', .85)  # Made again here already (this session's first run).
  assert [r.name for r in runner.runs_to_do(grid, str(out), results)] == [
      'sweep_b', 'fair', 't1', 'seed1', 't2', 'seed2']
  shutil.rmtree(out / 't0')  # A new session: t0 first, as the first run to start reads it.
  assert [r.name for r in runner.runs_to_do(grid, str(out), results)][:3] == [
      't0', 'sweep_b', 'fair']
  results['t1']['command'] += ' --changed'  # Not finished anywhere: ready, and then its reader.
  assert [r.name for r in runner.runs_to_do(grid, str(out), results)] == [
      't1', 'seed1', 't0', 'sweep_b', 'fair', 't2', 'seed2']


def test_a_teacher_is_kept_beside_the_results_and_a_fresh_machine_restores_it(
    tmp_path, fake_trainer, monkeypatch):
  """A run other runs read is kept beside the results file; on a fresh machine (same --out,
  run directories gone) it is restored, not made again, and a new student reads that instance.
  A kept copy that is no recorded instance is not restored (the run is made again)."""
  monkeypatch.setattr(records, 'forward_flops', lambda meta: (1e6, 'test'))
  out, results = tmp_path / 'out', tmp_path / 'study' / 'results.jsonl'
  reads = ' --config.distill.teacher_path={out}/teacher/params.npz'
  student = lambda name, accuracy: grid_lib.Run(name, f'python {fake_trainer} {accuracy} 1' + reads)
  runs = [grid_lib.Run('teacher', f'python {fake_trainer} 0.9 1'), student('student', .7)]
  grid = grid_lib.Grid(runs=runs)
  assert runner.run_grid(grid, str(out), log=lambda _: None, results=str(results)) == []
  kept = tmp_path / 'study' / 'kept'
  assert os.listdir(kept) == ['teacher']  # The student is read by no run: not kept.
  assert sorted(os.listdir(kept / 'teacher')) == ['metadata.json', 'params.npz', 'study.json']
  first = records.read_results(str(results))
  shutil.rmtree(out)  # A fresh machine; a new student to do.
  few = kept / 'teacher' / records.FEWSHOT_FILE  # Its few-shot file, older than its params as a
  few.write_text('{"command": "x", "results": []}')  # checkout may leave it: still its own.
  os.utime(few, (1e9, 1e9))
  grid = grid_lib.Grid(runs=runs + [student('student2', .8)])
  logged = []
  assert runner.run_grid(grid, str(out), log=logged.append, results=str(results)) == []
  assert not (out / 'teacher' / 'calls').exists()  # Restored, not made again.
  assert any(line.startswith('teacher: restored from') for line in logged), logged
  assert records.read_fewshot(str(out / 'teacher')) == dict(command='x', results=[])
  got = records.read_results(str(results))
  assert dict(got['teacher'], fewshot_command=None) == dict(
      first['teacher'], fewshot_command=None)  # Its record, wall time included, unchanged.
  assert got['student2']['teacher']['params_sha256'] == first['teacher']['params_sha256']
  shutil.rmtree(out)  # A kept copy that is no recorded instance: made again instead.
  (kept / 'teacher' / 'params.npz').write_bytes(b'changed by hand')
  logged.clear()
  grid = grid_lib.Grid(runs=list(grid.runs) + [student('student3', .6)])
  assert runner.run_grid(grid, str(out), log=logged.append, results=str(results)) == []
  assert calls(out, 'teacher') == 1
  assert any('not restored' in line for line in logged), logged
  assert records.params_sha256(str(kept / 'teacher')) == records.params_sha256(str(out / 'teacher'))


def test_an_unfinished_rebuild_keeps_the_finished_record(tmp_path, fake_trainer, monkeypatch):
  monkeypatch.setattr(records, 'forward_flops', lambda meta: (1e6, 'test'))
  grid = grid_lib.Grid(runs=[grid_lib.Run('a', f'python {fake_trainer} 0.9 1')])
  results = tmp_path / 'results.jsonl'
  one = str(tmp_path / 'one')
  assert runner.run_grid(grid, one, log=lambda _: None, results=str(results)) == []
  os.makedirs(tmp_path / 'two' / 'a')  # Made again elsewhere and cut before its export.
  records.update_results(str(results), grid, str(tmp_path / 'two'))
  assert records.read_results(str(results))['a']['accuracy_test'] == 0.9


def test_a_run_made_again_keeps_its_first_record_and_its_students_name_their_teacher(
    tmp_path, monkeypatch):
  """A teacher made again on another machine is another instance: the same command repeats
  byte for byte on one machine, not across machines (round 4's seed-0 teacher: validation
  85.42% first, 85.23% made again). Its record stays the first (the tables' baseline, its
  earlier students' teacher) and lists the new one; each distilled run records the instance it
  learned from."""
  monkeypatch.setattr(records, 'forward_flops', lambda meta: (1e6, 'test'))
  out, results = tmp_path / 'out', str(tmp_path / 'results.jsonl')
  grid = grid_lib.Grid(runs=[grid_lib.Run('t', 'python t.py'), grid_lib.Run(
      's', 'python s.py --config.distill.teacher_path={out}/t/params.npz')])
  sha = lambda data: hashlib.sha256(data).hexdigest()

  def make(name, accuracy, val, params):
    shutil.rmtree(out / name, ignore_errors=True)
    fake_run_dir(out, name, accuracy, accuracy_val=val)
    (out / name / 'params.npz').write_bytes(params)

  make('t', .8513, .8542, b'first')
  first = records.update_results(results, grid, str(out))['t']
  assert first['params_sha256'] == sha(b'first') and 'remade' not in first
  make('t', .8509, .8523, b'again')  # Made again: another instance.
  make('s', .82, .81, b'student')
  for _ in range(2):  # Rewritten after every run: listed once.
    got = records.update_results(results, grid, str(out))
  assert {k: got['t'][k] for k in ('accuracy_test', 'accuracy_val', 'params_sha256')} == dict(
      accuracy_test=.8513, accuracy_val=.8542, params_sha256=sha(b'first'))
  assert [(r['params_sha256'], r['accuracy_test']) for r in got['t']['remade']] == [
      (sha(b'again'), .8509)]
  assert got['s']['teacher'] == dict(params_sha256=sha(b'again'), accuracy_val=.8523,
                                     accuracy_test=.8509)
  assert 'teacher' not in got['t']
  rows = report.runs_markdown(grid.runs[:1], got).splitlines()[2:]
  assert [row.split(' | ')[:4] for row in rows] == [
      ['| t', '', '85.42', '85.13'],
      [f'| t, made again ({sha(b"again")[:8]})', '', '85.23', '85.09']]
  # A record written before the SHA was kept is told apart by the accuracies its export wrote:
  legacy = {k: v for k, v in got['t'].items() if k not in ('params_sha256', 'remade')}
  for accuracy, kept in ((.8509, .8509), (.8513, .8513)):  # The same instance, or another.
    with open(results, 'w') as f:
      f.write(json.dumps(dict(legacy, accuracy_test=accuracy, accuracy_val=.8523
                              if accuracy == .8509 else .8542)) + '\n')
    got = records.update_results(results, grid, str(out))['t']
    assert got['accuracy_test'] == kept and ('remade' in got) == (kept == .8513)
  make('t', .8509, .8523, b'again')  # The command changed: a new run, not an instance.
  grid.runs[0] = grid_lib.Run('t', 'python t.py --steps=5')
  assert 'remade' not in records.update_results(results, grid, str(out))['t']


def test_each_distilled_recipe_is_paired_with_the_teacher_instance_it_learned_from():
  """DeiT's student-vs-teacher comparison uses the instance each student learned from: the
  record's `teacher`; a student recorded before records named it learned from the teacher's
  first record. Runs not chosen, not distilled or unfinished are left out."""
  def run(name, seed, row='combined', chosen=True, teacher='t0'):
    flags = f' --config.distill.teacher_path=runs/{teacher}/params.npz' if teacher else ''
    return grid_lib.Run(name, f'python s.py{flags}', dict(row=row, seed=seed, chosen=chosen))

  runs = [run('t0', 0, 'teacher', teacher=''), run('t1', 1, 'teacher', teacher=''),
          run('c0', 0), run('c1', 1, teacher='t1'), run('c2', 2, teacher='t2'),
          run('sweep', 0, chosen=False), run('plain', 0, 'plain', teacher='')]
  got = {r.name: dict(name=r.name, command=r.command, finished=True) for r in runs}
  got['t0'].update(accuracy_test=.85, remade=[dict(params_sha256='ab' * 32, accuracy_test=.84)])
  got['t1'].update(accuracy_test=.80, params_sha256='cd' * 32)
  got['c0'].update(accuracy_test=.82)  # Before records named the teacher: t0's first record.
  got['c1'].update(accuracy_test=.83, teacher=dict(params_sha256='ef' * 32, accuracy_test=.81))
  got['c2'] = dict(got['c2'], finished=False)
  for name in ('sweep', 'plain'):
    got[name].update(accuracy_test=.99)
  text = report.student_teacher_markdown(runs, got)
  rows = text.splitlines()[2:]
  assert len(rows) == 1 and rows[0].startswith(
      '| combined | seed 0: 82.00 − 85.00 (first); seed 1: 83.00 − 81.00 (efefefef) | -0.50 |')
  # Errors 18 vs 15 and 17 vs 19: ratios 1.2 and 0.8947; their geometric mean −> +3.6%.
  cells = rows[0].split(' | ')
  assert cells[4:6] == ['undecided', f'{100 * (np.sqrt(1.2 * 17 / 19) - 1):+.1f}']
  assert report.student_teacher_markdown(runs[:2] + runs[-2:], got) == ''


def fake_run_dir(out, name, accuracy, **extra):
  """A finished run directory as train.py leaves it (the study ViT at 28px, batch 128)."""
  os.makedirs(out / name)
  (out / name / 'params.npz').write_bytes(b'')
  model = STUDY_CONFIG.model_config(extra.pop('model', 'vit')).to_dict()
  (out / name / 'metadata.json').write_text(json.dumps(dict(
      accuracy=accuracy, num_examples=10_000, model=model, image_size=28, num_classes=10,
      step=100, batch=128, **extra)))


def load_study_config():
  return config_lib.load_config_module(STUDY_CONFIG_FILE)


STUDY_CONFIG = load_study_config()


def test_report_is_regenerated_from_the_results_file_alone(tmp_path):
  out = tmp_path / 'out'
  runs = [grid_lib.Run(f'{m}_p{p}_s{s}', f'python -m vit_jax.main --config=c.py:{m},{p},{s}',
                    dict(model=m, pct=p, seed=s)) for m in ('vit', 'cnn') for p in (1, 100)
          for s in (0, 1)]
  accuracies = {'vit_p1_s0': .60, 'vit_p1_s1': .62, 'vit_p100_s0': .80, 'vit_p100_s1': .84,
                'cnn_p1_s0': .70, 'cnn_p1_s1': .70, 'cnn_p100_s0': .86}  # cnn_p100_s1 unfinished.
  for name, accuracy in accuracies.items():
    fake_run_dir(out, name, accuracy, accuracy_val=accuracy - .01, accuracy_train=1.,
                 num_examples_val=6000, num_examples_train=600)
  grid = grid_lib.Grid(runs=runs, tables=[
      grid_lib.Table('size', 'Size', row='model', col='pct', col_label='% ', log_x=True,
                     baseline='cnn'),
      grid_lib.Table('size_val', 'Val', row='model', col='pct', metric='accuracy_val')])
  results = tmp_path / 'docs' / 'results.jsonl'
  records.update_results(str(results), grid, str(out))
  lines = results.read_text().splitlines()
  assert [json.loads(line)['name'] for line in lines] == sorted(
      accuracies, key=[r.name for r in runs].index)  # Grid order; no line for cnn_p100_s1.
  shutil.rmtree(out)  # The report needs the file only.
  doc = tmp_path / 'doc.md'
  doc.write_text(f'intro\n{report.DOC_BEGIN}\nold\n{report.DOC_END}\noutro\n')
  by_name = records.read_results(str(results))
  text = report.report_markdown(grid, by_name, str(tmp_path / 'figs'), 'figs', str(results))
  report.write_into_doc(str(doc), text)
  lines = text.splitlines()
  assert '| model | % 1 | % 100 |' in lines
  assert ('| vit | 61.00 ± 1.41 <sub>vit_p1_s0 vit_p1_s1</sub> | '
          '82.00 ± 2.83 <sub>vit_p100_s0 vit_p100_s1</sub> |') in lines
  assert ('| cnn | 70.00 ± 0.00 <sub>cnn_p1_s0 cnn_p1_s1</sub> | '
          '86.00 (1 unfinished) <sub>cnn_p100_s0 cnn_p100_s1</sub> |') in lines
  assert '| vit | 60.00 ± 1.41 <sub>vit_p1_s0 vit_p1_s1</sub> |' in text  # The val table.
  # Paired by seed (same slice): p1 -10 and -8; p100 only seed 0 has both runs. Errors: 40 and
  # 38 against 30 (the geometric mean of the ratios: +30.0%), 20 against 14 (+42.9%).
  assert ('| vit − cnn | -9.00 ± 1.41 (0 of 2 > 0); error +30.0% | '
          '-6.00 (0 of 1 > 0); error +42.9% |') in lines
  assert text.count('paired by seed') == 1  # The val table has no baseline.
  assert '7 of 8 runs finished' in text and '![Size](figs/size.png)' in text
  assert '| cnn_p100_s1 | | | unfinished |' in text
  flops = STUDY_CONFIG_FLOPS()
  assert (f'| vit_p1_s0 | 100.00 | 59.00 | 60.00 | 100 | 12800 | {flops / 1e6:.1f} | '
          f'{3 * flops * 12800 / 1e12:.2f} | 0m00s | `python -m vit_jax.main '
          f'--config=c.py:vit,1,0 --workdir={out}/vit_p1_s0` |') in lines
  for png in ('size.png', 'size_compute.png', 'size_val.png'):
    assert (tmp_path / 'figs' / png).stat().st_size > 1000
  content = doc.read_text()
  assert content.startswith('intro\n') and content.endswith('outro\n') and 'old' not in content


def test_the_report_of_a_grid_still_running_skips_the_plots_of_empty_tables(tmp_path):
  out = tmp_path / 'out'
  fake_run_dir(out, 'vit_p1_s0', .6, accuracy_val=.59, accuracy_train=1.)
  runs = [grid_lib.Run(n, f'python -m vit_jax.main --config=c.py:{n}', dict(model=m, pct=1))
          for n, m in (('vit_p1_s0', 'vit'), ('cnn_p1_s0', 'cnn'))]
  tables = [grid_lib.Table('size', 'Size', row='model', col='pct', log_x=True),
            grid_lib.Table('size_val', 'Val', row='model', col='pct', metric='accuracy_val'),
            grid_lib.Table('later', 'Later', row='model', col='pct', where=dict(model='cnn'))]
  grid = grid_lib.Grid(runs=runs, tables=tables)
  by_name = records.update_results(str(tmp_path / 'r.jsonl'), grid, str(out))
  text = report.report_markdown(grid, by_name, str(tmp_path / 'figs'), 'figs', 'r.jsonl')
  assert '1 of 2 runs finished' in text and '| cnn | unfinished <sub>cnn_p1_s0</sub> |' in text
  assert text.count('(No finished run of this table yet: no plot.)') == 1
  assert sorted(os.listdir(tmp_path / 'figs')) == [
      'size.png', 'size_compute.png', 'size_val.png', 'size_val_compute.png']


def STUDY_CONFIG_FLOPS():  # noqa: N802
  """The study ViT's forward FLOPs per image at 28px, by vit_jax.flops."""
  return flops.count_flops(STUDY_CONFIG.model_config('vit'), 28, 10)['total']


def test_record_counts_compute_from_steps_batch_flops_and_the_teacher(tmp_path):
  out = tmp_path / 'out'
  fake_run_dir(out, 'teacher', .9, model='resnet')
  fake_run_dir(out, 'student', .8)
  run = grid_lib.Run('student', 'python -m vit_jax.main --config=c.py '
                  '--config.distill.teacher_path={out}/teacher/params.npz')
  record = records.run_record(run, str(out))
  vit = STUDY_CONFIG_FLOPS()
  resnet = flops.xla_flops(STUDY_CONFIG.model_config('resnet'), 28, 10)
  assert 30e6 < resnet < 45e6 and 15e6 < vit < 25e6  # The 37 and 19 MFLOPs.
  assert record['images_seen'] == 100 * 128 and record['forward_flops'] == vit
  assert record['teacher_forward_flops'] == pytest.approx(resnet)
  assert record['train_flops'] == pytest.approx((3 * vit + resnet) * 100 * 128)
  assert record['flops_source'] == 'vit_jax.flops'
  assert records.run_record(grid_lib.Run('teacher', 'python x'), str(out))['flops_source'] == (
      'xla cost analysis')


def test_a_broken_results_line_is_one_clear_error(tmp_path):
  path = tmp_path / 'results.jsonl'
  path.write_text('{"name": "a"}\n{"name": \n')
  with pytest.raises(ValueError, match=r'results.jsonl:2 is not a JSON line'):
    records.read_results(str(path))


def test_seeds_take_different_slices_and_validation_is_disjoint_from_all_of_them():
  """Every run of a three-seed grid: its train slice misses train[90%:]; seeds differ."""
  grid = grid_lib.load_grid(STUDY_GRID)  # The defaults: three seeds.
  size, slices = 60_000, {}
  for run in grid.runs:
    arg = re.search(r'--config=\S+?:(\S+)', run.command)[1]
    config = STUDY_CONFIG.get_config(arg)
    train, val, train_eval = (index_set(config.pp[k], size) for k in ('train', 'val',
                                                                       'train_eval'))
    assert val == set(range(54_000, 60_000)) and not train & val, run.name
    assert train_eval <= train and 0 < len(train_eval) <= 3000, run.name
    slices.setdefault((run.tags.get('pct'), run.tags.get('seed')), train)
  for pct in (1, 5):
    seeds = [slices[(pct, s)] for s in range(3)]
    assert all(len(x) == 600 * pct for x in seeds)
    assert not seeds[0] & seeds[1] and not seeds[1] & seeds[2] and not seeds[0] & seeds[2]


def index_set(spec, size):
  import tensorflow_datasets as tfds
  sizes = {'train': types.SimpleNamespace(num_examples=size)}
  (part,) = tfds.core.ReadInstruction.from_spec(spec).to_absolute(sizes)
  return set(range(part.from_ or 0, size if part.to is None else part.to))


def test_study_grid_lists_dependencies_before_their_users():
  for arg in ('', 'runlocal', 'seeds=1,steps=50,pcts=1+5', 'seeded=data+remedies'):
    grid = grid_lib.load_grid(f'{STUDY_GRID}:{arg}')
    seen = set()
    for run in grid.runs:
      for dependency in re.findall(r'\{out\}/([\w.+-]+)/params\.npz', run.command):
        assert dependency in seen, f'{run.name} uses {dependency} before it runs'
      seen.add(run.name)
    for table in grid.tables if arg != 'runlocal' else ():  # Every table has cells.
      assert cells_lib.table_cells(table, grid.runs)[2], (arg, table.name)


def write_idx(folder, counts):
  rng = np.random.default_rng(0)
  for split, n in counts.items():
    image_file, label_file = fashion_mnist.FILENAMES[split]
    write_idx_gz(str(folder / image_file), rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
    write_idx_gz(str(folder / label_file), np.arange(n) % 10)


def test_prepare_folders_writes_classes_in_label_order_and_linked_subsets(tmp_path):
  write_idx(tmp_path, {'train': 40, 'test': 20})
  root = tmp_path / 'folders'
  folders.prepare_folders(str(root), limit=3, source_dir=str(tmp_path), log=lambda _: None)
  classes = sorted(os.listdir(root / 'fashion_mnist' / 'train'))
  assert classes[0] == '0_t_shirt_top' and classes[9] == '9_ankle_boot'
  assert len(os.listdir(root / 'fashion_mnist' / 'train' / '4_coat')) == 3  # limit
  assert sorted(os.listdir(root / 'fashion_mnist' / 'test' / '4_coat')) == ['00004.png',
                                                                           '00014.png']
  assert sorted(os.listdir(root / 'fashion_mnist_5-9' / 'test')) == classes[5:]
  assert os.listdir(root / 'fashion_mnist_0-4' / 'train' / '0_t_shirt_top') == os.listdir(
      root / 'fashion_mnist' / 'train' / '0_t_shirt_top')
  os.remove(root / 'fashion_mnist' / 'test' / '4_coat' / '00004.png')
  folders.prepare_folders(str(root), source_dir=str(tmp_path), log=lambda _: None)
  assert not os.path.exists(root / 'fashion_mnist' / 'test' / '4_coat' / '00004.png')  # Once.


def test_a_runlocal_study_run_trains_and_reports(tmp_path, monkeypatch):
  write_idx(tmp_path, {'train': 80, 'test': 20})
  monkeypatch.setenv(fashion_mnist.SOURCE_DIR_ENV, str(tmp_path))
  monkeypatch.chdir(ROOT)  # The grid's commands name configs/ relative to the repository.
  out = tmp_path / 'out'
  grid = grid_lib.load_grid(f'{STUDY_GRID}:runlocal')
  # With round 3's few-shot measurement of the encoder, as its smoke runs declare it.
  fewshot = grid_lib.load_grid(f'{ROUND3_GRID}:runlocal').fewshot
  grid = grid_lib.Grid(runs=grid.runs[:1], tables=grid.tables[:1], folders=grid.folders,
                    folder_limit=grid.folder_limit, fewshot=fewshot)
  results = tmp_path / 'results.jsonl'
  lines = []
  assert runner.run_grid(grid, str(out), log=lines.append, results=str(results)) == []
  (record,) = records.read_results(str(results)).values()
  measured = json.loads((out / record['name'] / records.FEWSHOT_FILE).read_text())
  assert [r['shots'] for r in measured['results']] == [1, 2] and measured['num_test'] == 20
  assert [record['fewshot_1shot'], record['fewshot_2shot']] == [
      r['mean'] for r in measured['results']]
  assert record['fewshot_command'] == (
      f'python -m vit_jax.fewshot --checkpoint={out / record["name"]} '
      f'--dataset={out}/data/fashion_mnist --train_split=train --shots=1,2 --holdout=2 '
      '--seeds=1 --json')
  assert any('few-shot linear 1-shot' in line for line in lines)
  lines.clear()  # Measured once: a rerun of the grid skips the run and its measurement.
  assert runner.run_grid(grid, str(out), log=lines.append, results=str(results)) == []
  assert not any('few-shot' in line for line in lines), lines
  # 80 train images: train[0%:50%] trained, its first 5% (4) for train accuracy, train[90%:]
  # (8) for validation; the 20 test images.
  assert (record['num_examples_train'], record['num_examples_val'],
          record['num_examples_test']) == (4, 8, 20)
  assert all(0 <= record[f'accuracy_{k}'] <= 1 for k in ('train', 'val', 'test'))
  assert record['images_seen'] == record['steps'] * record['batch'] > 0
  assert record['command'].startswith('python -m vit_jax.main --config=configs/study_fashion')
  metrics = [json.loads(line) for line in (out / record['name'] / 'metrics.jsonl').open()]
  assert metrics[-1]['accuracy_val'] == record['accuracy_val']
  text = report.report_markdown(grid, {record['name']: record}, str(tmp_path / 'report'), '.',
                               str(results))
  assert f'{100 * record["accuracy_test"]:.2f}' in text
  assert f'1: {100 * record["fewshot_1shot"]:.2f}, 2: {100 * record["fewshot_2shot"]:.2f}' in text


def test_grid_steps_per_fraction_reach_every_arm():
  grid = grid_lib.load_grid(f'{STUDY_GRID}:steps=1:700+5:900+100:1100,seeds=3,full_seeds=1,'
                            'seeded=data+remedies+pretrain,later_pcts=1+5')
  steps = {r.name: int(re.search(r'steps=(\d+)', r.command)[1]) for r in grid.runs}
  assert (steps['vit_p1_s2'], steps['vit_p5_s2_dtok'], steps['resnet_p100_s0']) == (
      700, 900, 1100)
  # Classes 5-9 at 1% / 10% hold 0.5% / 5% of the images; classes 0-4 half of them.
  assert (steps['resnet_c5-9_p1_s1_finetune'], steps['vit_c5-9_p10_s2_scratch'],
          steps['vit_c0-4_pretrain']) == (700, 900, 1100)
  assert 'resnet_p100_s1' not in steps  # full_seeds=1.
  with pytest.raises(ValueError, match=r'names no steps for pct \[5, 100\]'):
    grid_lib.load_grid(f'{STUDY_GRID}:steps=1:700')


def test_grid_defaults_seed_each_arm_as_planned_and_give_augmentation_4x_the_steps():
  grid = grid_lib.load_grid(STUDY_GRID)
  names = [r.name for r in grid.runs]
  steps = {r.name: int(re.search(r'steps=(\d+)', r.command)[1]) for r in grid.runs}
  assert {'vit_p1_s2_combo', 'resnet_p5_s2', 'hybrid_p5_s2', 'vit_c5-9_p10_s0_finetune'} <= set(
      names)
  assert not [n for n in names if 'c5-9' in n and '_s0_' not in n]  # Pretraining: one seed.
  assert not [n for n in names if re.fullmatch(r'vit_p5_s[12]_\w+', n)]  # Later seeds: 1%.
  assert 'vit_p1_s0_p4' in names and 'vit_p1_s1_p4' not in names  # later_skip=p4.
  assert [n for n in names if n.endswith('x4')] == names[-2:] == ['vit_p1_s0_aug_x4',
                                                                  'vit_p1_s0_x4']
  assert (steps['vit_p1_s0_aug_x4'], steps['vit_p1_s0_x4']) == (
      4 * steps['vit_p1_s0_aug'], 4 * steps['vit_p1_s0'])
  wider = grid_lib.load_grid(f'{STUDY_GRID}:later_pcts=1+5,later_skip=-,budget_pcts=1+5')
  wider_names = {r.name for r in wider.runs}
  assert {'vit_p5_s2_p4', 'vit_p5_s0_x4'} <= wider_names and len(wider.runs) == len(
      grid.runs) + 2 * 8 + 2 * 1 + 2  # 5% remedies and 1% p4 for seeds 1, 2; 5% x4 runs.
  assert len(grid_lib.load_grid(f'{STUDY_GRID}:seeds=2,seeded=pretrain:5').runs) == len(
      grid_lib.load_grid(f'{STUDY_GRID}:seeds=2,seeded=pretrain').runs)  # At most `seeds`.
  with pytest.raises(ValueError, match=r"Unknown arm or count 'pretrain:x'"):
    grid_lib.load_grid(f'{STUDY_GRID}:seeded=data+pretrain:x')
  with pytest.raises(ValueError, match=r"Bad fractions '1 5'"):
    grid_lib.load_grid(f'{STUDY_GRID}:budget_pcts=1 5')
  with pytest.raises(ValueError, match=r"Unknown remedy 'p5' in later_skip=p5"):
    grid_lib.load_grid(f'{STUDY_GRID}:later_skip=p5')


def test_the_runner_command_lists_its_flags_and_fails_in_one_line():
  """`python -m research.small_data`: absl flags at module level, so `--help` lists them."""
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  command = [sys.executable, '-m', 'research.small_data']
  proc = subprocess.run([*command, '--help'], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=300)  # absl's help exits 1, as vit_jax.main's.
  for flag in ('grid', 'out', 'results', '[no]report', 'report_dir', 'doc'):
    assert f'  --{flag}:' in proc.stdout, flag
  proc = subprocess.run([*command, '--grid=research/small_data/none.py'], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 1 and proc.stderr.strip().startswith("error: Grid file '"), proc.stderr


RECORD_AFTER_LOAD_CODE = r"""
import json, sys
from research.small_data import records
from vit_jax import config_lib
records.load_code()
study = config_lib.load_config_module('configs/study_fashion_mnist.py')
before = {m for m in sys.modules if m.startswith('vit_jax')}
for name in ('vit', 'hybrid28', 'swin', 'resnet'):  # Every family the grids train.
  model = json.loads(study.model_config(name).to_json())
  assert records.forward_flops(dict(model=model, image_size=28, num_classes=10))[0] > 0
records.val_curve(sys.argv[1])
records.teacher_metadata('--config.distill.teacher_path=' + sys.argv[1] + '/params.npz')
print(sorted({m for m in sys.modules if m.startswith('vit_jax')} - before))
"""


def test_a_runner_imports_what_recording_needs_when_it_starts(tmp_path):
  """A runner that outlived a code change once failed at record time (a module imported after
  the change beside ones imported before it): `records.load_code` at its start leaves nothing of
  vit_jax for recording a run to import later."""
  proc = subprocess.run([sys.executable, '-c', RECORD_AFTER_LOAD_CODE, str(tmp_path)], cwd=ROOT,
                        env=dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=ROOT),
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.strip() == '[]', proc.stdout


def test_a_table_baseline_is_one_row_or_a_row_per_row():
  one = grid_lib.Table('t', 'T', row='model', col='pct', baseline='cnn')
  per_row = grid_lib.Table('t', 'T', row='init', col='pct', baseline={'vit ft': 'vit', 'x': 'y'})
  assert report.baselines(one, ['cnn', 'vit', 'hybrid']) == {'vit': 'cnn', 'hybrid': 'cnn'}
  assert report.baselines(per_row, ['vit', 'vit ft']) == {'vit ft': 'vit'}
  grid = grid_lib.load_grid(STUDY_GRID)
  (pretraining,) = [t for t in grid.tables if t.name == 'pretraining']
  rows = cells_lib.table_cells(pretraining, grid.runs)[0]
  assert report.baselines(pretraining, rows) == {  # Each pretrained model against itself.
      'ViT pretrained on 0-4': 'ViT from scratch',
      'ResNet pretrained on 0-4': 'ResNet from scratch'}


def test_the_study_page_is_the_report_of_the_committed_results(tmp_path):
  """Round 2's page's generated block is what the report command makes from the committed
  docs/study/results.jsonl with today's grid: no typed or stale number on the page."""
  page = os.path.join(ROOT, 'docs', 'small_data_study_round2.md')
  results = os.path.join('docs', 'study', 'results.jsonl')
  grid = grid_lib.load_grid(STUDY_GRID)
  by_name = records.read_results(os.path.join(ROOT, results))
  text = report.report_markdown(grid, by_name, str(tmp_path), 'study', results)
  with open(page) as f:
    content = f.read()
  block = content[content.index(report.DOC_BEGIN) + len(report.DOC_BEGIN) + 1:
                  content.index(report.DOC_END)]
  assert block == text
  prose = content[:content.index(report.DOC_BEGIN)]  # Its mean ± std figures come from the block.
  typed = [f for f in re.findall(r'[−+-]?\d+\.\d\d ± \d+\.\d\d', prose)
           if f.replace('−', '-') not in block]
  assert not typed, f'the page quotes {typed}, which its generated tables do not hold'
  assert all(r.get('finished') for r in by_name.values())  # Only finished runs are committed.
  assert set(by_name) <= {r.name for r in grid.runs}  # No record of a run the grid lost.
  # Every claim names rows that have runs; three slices where round 2 ran its later seeds.
  tables = {t.name: t for t in grid.tables}
  slices = {c.text: len(report.claim_effects(c, tables[c.table], grid.runs, by_name))
            for c in grid.claims}
  assert set(slices.values()) == {1, 3}, slices
  assert slices['A smaller model helps (1%): smaller: width 64 − ViT'] == 3


ROUND3_GRID = os.path.join(ROOT, 'research', 'small_data', 'fashion_mnist_round3.py')


def test_the_budget_is_where_validation_stops_rising():
  curve = [[500, .60], [1000, .70], [1500, .74], [2000, .743], [2500, .741], [3000, .745]]
  assert select.budget_from_curve(curve) == 1500  # Later gains stay within half a point.
  assert select.budget_from_curve(curve, tolerance=0.001) == 3000
  assert select.budget_from_curve([[1000, .8], [500, .5]]) == 1000  # Any order.
  with pytest.raises(ValueError, match='no validation curve'):
    select.budget_from_curve([])
  assert select.probe_budget({'finished': False, 'val_curve': curve}) is None


def test_the_choice_waits_for_the_whole_sweep_and_takes_the_best_validation():
  sweep = {('1e-3', '0.05'): 'a', ('1e-3', '0.3'): 'b', ('4e-3', '0.05'): 'c'}
  done = lambda val, test=.5: dict(finished=True, accuracy_val=val, accuracy_test=test)  # noqa: E731
  records_ = {'a': done(.70, test=.99), 'b': done(.75), 'c': dict(finished=False)}
  assert select.choose(sweep, records_) is None  # 'c' still runs.
  records_['c'] = done(.75)
  assert select.choose(sweep, records_) == ('1e-3', '0.3')  # Best val (test never read); ties:
  records_['b'] = done(.60)  # the first in order.
  assert select.choose(sweep, records_) == ('4e-3', '0.05')


def test_t_interval_and_the_verdict_words():
  mean, low, high = report.t_interval([1., 2., 3.])
  assert mean == 2. and high - mean == pytest.approx(4.3027 / np.sqrt(3), rel=1e-4)
  assert report.t_interval([5.]) is None
  assert report.verdict([1., 2., 3.]) == 'undecided'  # [-0.48, +4.48] holds 0.
  assert report.verdict([3., 4., 5.]) == 'supported'
  assert report.verdict([-3., -4., -5.]) == 'not supported'
  assert report.verdict([9.]) == 'undecided'  # One slice: no verdict.
  assert report.verdict([.1, -.1, .2], kind='within') == 'supported'
  assert report.verdict([3., 4., 5.], kind='within') == 'not supported'
  assert report.verdict([0., 1., 2.], kind='within') == 'undecided'
  # "As good (within 1 point) or better": beating the other arm by far supports it too.
  assert report.verdict([5., 6., 7.], kind='at_least') == 'supported'
  assert report.verdict([-.5, -.4, -.3], kind='at_least') == 'supported'
  assert report.verdict([-5., -6., -7.], kind='at_least') == 'not supported'
  assert report.verdict([-2., -1., 0.], kind='at_least') == 'undecided'


def _finish(grid, records_, val):
  for run in grid.runs:
    records_.setdefault(run.name, dict(
        name=run.name, command=run.command, finished=True, accuracy_val=val(run),
        accuracy_test=val(run) - .01, accuracy_train=1., wall_s=60., steps=100,
        images_seen=12_800, forward_flops=1e7, train_flops=4e11, fewshot_10shot=val(run) - .02,
        val_curve=[[250, .5], [500, .7], [750, .702], [1000, .703]]))


def test_round3_stages_appear_as_their_records_come_and_every_claim_gets_its_runs():
  grid = grid_lib.load_grid(ROUND3_GRID)
  assert len(grid.runs) == 10 and all(r.name.endswith('_probe') for r in grid.runs)
  records_ = {}
  _finish(grid, records_, lambda run: .7)
  grid = grid.resolve(records_)  # Probes done: the sweeps at the budget the curve gives.
  sweeps = [r for r in grid.runs if r.tags.get('arm') == 'sweep']
  # Three learning rates, each at the recipe's own weight decay (plain 0.05, strong 0.3).
  assert len(sweeps) == 10 * 3 and all('steps=500,' in r.command for r in sweeps)
  assert {(r.tags['recipe'], r.tags['wd']) for r in sweeps} == {('plain', '0.05'),
                                                                 ('strong', '0.3')}
  assert not any(r.tags['chosen'] for r in sweeps)
  # The sweep table: a row per arm and fraction (each fraction chooses its own) and weight
  # decay, a column per learning rate in increasing order, one run a cell.
  table = next(t for t in grid.tables if t.name == 'r3_sweep')
  rows, cols, cells = cells_lib.table_cells(table, grid.runs)
  assert {'ViT plain, 1%, wd 0.05', 'ViT plain, 10%, wd 0.05', 'Swin strong, 1%, wd 0.3'} <= set(
      rows) and len(rows) == 10
  assert cols == [5e-4, 1.5e-3, 4e-3] and all(len(names) == 1 for names in cells.values())
  # The sweep's best validation run wins, whatever its test accuracy (1.5e-3: inside the grid).
  best = lambda run: .8 if run.tags.get('lr') == '1.5e-3' else .7  # noqa: E731
  _finish(grid, records_, best)
  grid = grid_lib.fully_resolved(grid, records_)
  chosen = [r for r in grid.runs if r.tags.get('chosen')]
  assert all(f'lr=1.5e-3,wd={r.tags["wd"]}' in r.command for r in chosen)
  names = {r.name for r in grid.runs}
  assert {'r3_swin_plain_p1_s2', 'r3_vit_strong_p1_s1', 'r3_vit_pe-relative_p5_s2',
          'r3_vit_pe-none_p1_s0', 'r3_vit_strong_p1_s0_lr1.5e-3_wd0.3'} <= names
  # Probes, sweeps, seeds, posemb; then label-free pretraining (MAE, MPP) and 3 fine-tunes each;
  # then the full-data recipe at 2 epoch counts (its final run once they are in).
  assert len(grid.runs) == 10 + 10 * 3 + 10 * 2 + 4 * 2 * 3 + 2 * (1 + 3) + 2
  # Arm by arm: an arm's other seeds come before the next arm's sweep.
  order = [r.name for r in grid.runs]
  assert (order.index('r3_vit_plain_p1_s0_lr4e-3_wd0.05') < order.index('r3_vit_plain_p1_s2')
          < order.index('r3_vit_strong_p1_s0_lr5e-4_wd0.3'))
  full = grid_lib.load_grid(f'{ROUND3_GRID}:wds=0.05+0.3').resolve(records_)
  assert len([r for r in full.runs if r.tags.get('arm') == 'sweep']) == 10 * 3 * 2
  rows, _, cells = cells_lib.table_cells(table, full.runs)
  assert len(rows) == 20 and all(len(names) == 1 for names in cells.values())
  _finish(grid, records_, lambda run: .75)
  tables = {t.name: t for t in grid.tables}
  for claim in grid.claims:  # Every claim's terms name rows that have runs on three slices.
    assert len(report.claim_effects(claim, tables[claim.table], grid.runs, records_)) == 3, (
        claim.text)


def test_a_choice_at_the_sweeps_edge_first_tries_one_step_past_it():
  grid = grid_lib.load_grid(f'{ROUND3_GRID}:parts=matched,models=vit')
  records_ = {}
  _finish(grid, records_, lambda run: .7)
  grid = grid.resolve(records_)
  lowest = lambda run: {'5e-4': .8, '1.67e-4': .75}.get(run.tags.get('lr'), .7)  # noqa: E731
  _finish(grid, records_, lowest)
  grid = grid.resolve(records_)  # 5e-4 won at the edge: 1.67e-4 (5e-4 x 5e-4 / 1.5e-3) first.
  new = {r.name for r in grid.runs} - set(records_)
  assert new == {'r3_vit_plain_p1_s0_lr1.67e-4_wd0.05', 'r3_vit_strong_p1_s0_lr1.67e-4_wd0.3'}
  assert not any(r.tags.get('chosen') for r in grid.runs)  # No seeds before it is in.
  _finish(grid, records_, lowest)
  grid = grid_lib.fully_resolved(grid, records_)
  seeds = [r for r in grid.runs if r.tags.get('arm') == 'matched']
  assert len(seeds) == 4 and all('lr=5e-4,' in r.command for r in seeds)
  # One step at most (lr_edge=1): a new edge winner is chosen, not extended again.
  records_['r3_vit_plain_p1_s0_lr1.67e-4_wd0.05']['accuracy_val'] = .9
  grid = grid_lib.fully_resolved(grid_lib.load_grid(f'{ROUND3_GRID}:parts=matched,models=vit'),
                                 records_)
  assert {r.name for r in grid.runs if 'plain_p1_s1' in r.name} == {'r3_vit_plain_p1_s1'}
  assert 'lr=1.67e-4,' in next(r.command for r in grid.runs if r.name == 'r3_vit_plain_p1_s1')
  off = grid_lib.load_grid(f'{ROUND3_GRID}:parts=matched,models=vit,lr_edge=0')
  assert len(grid_lib.fully_resolved(off, records_).runs) == 2 + 2 * 3 + 2 * 2  # No extension.


def test_round3_arms_see_the_same_input_and_swin_the_vits_regularisation():
  grid = grid_lib.load_grid(ROUND3_GRID)
  configs = {r.name: STUDY_CONFIG.get_config(re.search(r'--config=\S+?:(\S+)', r.command)[1])
             for r in grid.runs}
  assert {c.pp.crop for c in configs.values()} == {28}  # Round 2's hybrid read 32px.
  depth = {n: c.model.get('stochastic_depth') for n, c in configs.items()}
  assert depth['r3_swin_plain_p1_probe'] == depth['r3_vit_plain_p1_probe'] == 0.
  assert depth['r3_swin_strong_p1_probe'] == depth['r3_vit_strong_p1_probe'] == 0.1
  strong = configs['r3_resnet_strong_p1_probe']
  assert (strong.mixup, strong.pp.randaug.num_layers, strong.pp.train_aug) == (.2, 2, 'pad_flip')
  lr = STUDY_CONFIG.get_config('model=resnet,pct=1,lr=4e-3,wd=0.3')
  assert (lr.base_lr, lr.weight_decay) == (4e-3, .3)
  with pytest.raises(ValueError, match='no effect on the ResNet'):
    STUDY_CONFIG.get_config('model=resnet,pct=1,sd=0.1')
  with pytest.raises(ValueError, match=r'Bad lrs=1e-3\+fast'):
    grid_lib.load_grid(f'{ROUND3_GRID}:lrs=1e-3+fast')


def test_the_runner_resolves_a_grid_until_it_adds_no_run(tmp_path, fake_trainer, monkeypatch):
  monkeypatch.setattr(records, 'forward_flops', lambda meta: (1e6, 'test'))
  first = grid_lib.Run('a', f'python {fake_trainer} 0.5 1')

  def resolve(records_):
    runs = [first]
    if records_.get('a', {}).get('finished'):  # 'b' depends on a's recorded result.
      runs.append(grid_lib.Run('b', f'python {fake_trainer} {records_["a"]["accuracy_test"]} 1'))
    return grid_lib.Grid(runs=runs, resolve=resolve)

  results = tmp_path / 'results.jsonl'
  out = tmp_path / 'out'
  assert runner.run_grid(resolve({}), str(out), log=lambda _: None, results=str(results)) == []
  assert records.read_results(str(results))['b']['accuracy_test'] == 0.5
  assert (calls(out, 'a'), calls(out, 'b')) == (1, 1)


def test_a_run_that_unlocks_a_stage_is_followed_by_it_before_the_runs_listed_after(
    tmp_path, fake_trainer, monkeypatch):
  """The runner resolves after every run: 'a' unlocks 'a_seed', listed before 'z', so it runs
  before 'z' (not after a whole pass); a failing run is started once per call, not again."""
  monkeypatch.setattr(records, 'forward_flops', lambda meta: (1e6, 'test'))

  def resolve(records_):
    runs = [grid_lib.Run('a', f'python {fake_trainer} 0.5 1')]
    if records_.get('a', {}).get('finished'):
      runs.append(grid_lib.Run('a_seed', f'python {fake_trainer} 0.6 1'))
    runs += [grid_lib.Run('broken', f'python {fake_trainer} 0.1 99'),
             grid_lib.Run('z', f'python {fake_trainer} 0.7 1')]
    return grid_lib.Grid(runs=runs, resolve=resolve)

  out, results, lines = tmp_path / 'out', tmp_path / 'results.jsonl', []
  assert runner.run_grid(resolve({}), str(out), log=lines.append,
                         results=str(results)) == ['broken']
  started = [re.match(r'\[\d+/\d+\] (\S+): python', line) for line in lines]
  assert [m[1] for m in started if m] == ['a', 'a_seed', 'broken', 'z']
  assert calls(out, 'broken') == 1
  lines.clear()  # Called again: each finished run is one line, the failed run one more try.
  assert runner.run_grid(resolve({}), str(out), log=lines.append,
                         results=str(results)) == ['broken']
  assert calls(out, 'broken') == 2 and calls(out, 'z') == 1
  assert [sum(f'{n}: finished, skipped' in line for line in lines) for n in ('a', 'z')] == [1, 1]
  assert {n for n, r in records.read_results(str(results)).items() if r['finished']} == {
      'a', 'a_seed', 'z'}


def test_a_record_keeps_the_validation_curve(tmp_path, monkeypatch):
  monkeypatch.setattr(records, 'forward_flops', lambda meta: (1e6, 'test'))
  out = tmp_path / 'out'
  fake_run_dir(out, 'probe', .8)
  (out / 'probe' / 'metrics.jsonl').write_text(
      '{"step": 50, "accuracy_val": 0.5, "loss": 1}\n{"step": 100, "accuracy_val": 0.6}\n'
      '{"step": 100, "accuracy_val": 0.65}\n')  # A resumed run redid step 100.
  record = records.run_record(grid_lib.Run('probe', 'python x'), str(out))
  assert record['val_curve'] == [[50, .5], [100, .65]]


def _captured_figure(monkeypatch, plot, *args):
  """Runs `plot(*args)` and returns the figure it closed (its PNG saved)."""
  plt = plots.pyplot()
  closed = []
  monkeypatch.setattr(plt, 'close', closed.append)
  plot(*args)
  return closed[0]


def test_plots_give_each_row_its_style_and_keep_the_legend_off_the_data(tmp_path, monkeypatch):
  styles = [plots.row_style(i) for i in range(12)]  # Round 2's remedies plot had 12 rows.
  assert len({(tuple(s['color']), s['marker']) for s in styles}) == 12
  assert len({tuple(s['color']) for s in styles}) == 12
  table = grid_lib.Table('t', 'T', row='model', col='pct')
  runs = [grid_lib.Run(f'{m}{p}', 'x', dict(model=m, pct=p)) for m in 'abcdefghijkl'
          for p in (1, 5)]
  records_ = {r.name: dict(accuracy_test=.5 + .01 * i, train_flops=1e12 * (1 + i))
              for i, r in enumerate(runs)}
  for plot in (plots.plot_table, plots.plot_compute):
    fig = _captured_figure(monkeypatch, plot, table, runs, records_, str(tmp_path / 'p.png'))
    ax = fig.axes[0]
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1  # Right of the axes: never over the data.
  # The compute plot: a legend of the rows (colours) and one of the columns (markers), not an
  # entry per (row, column) pair.
  rows_legend = next(a for a in ax.get_children() if isinstance(a, type(ax.get_legend()))
                     and a is not ax.get_legend())
  assert [t.get_text() for t in rows_legend.get_texts()] == list('abcdefghijkl')
  assert [t.get_text() for t in ax.get_legend().get_texts()] == ['1', '5']
  assert rows_legend.get_window_extent().y0 > ax.get_legend().get_window_extent().y1
  markers = {h.get_paths()[0].vertices.tobytes() for h in ax.collections[:2]}
  assert len(markers) == 2


def test_a_long_legend_takes_columns_instead_of_outgrowing_its_plot(tmp_path, monkeypatch):
  """Round 3's sweep had a 34-entry legend, taller than its plot."""
  table = grid_lib.Table('t', 'T', row='arm', col='lr', log_x=True, sort_cols=True)
  runs = [grid_lib.Run(f'{a}{lr}', 'x', dict(arm=f'arm {a}', lr=lr)) for a in range(30)
          for lr in (1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2)]
  records_ = {r.name: dict(accuracy_val=.5, train_flops=1e12) for r in runs}
  table = dataclasses.replace(table, metric='accuracy_val')
  for plot in (plots.plot_table, plots.plot_compute):
    fig = _captured_figure(monkeypatch, plot, table, runs, records_, str(tmp_path / 'p.png'))
    fig.canvas.draw()
    ax = fig.axes[0]
    legends = [a for a in ax.get_children() if isinstance(a, type(ax.get_legend()))]
    bottom = min(legend.get_window_extent().y0 for legend in legends)
    top = max(legend.get_window_extent().y1 for legend in legends)
    assert top - bottom <= 1.1 * ax.get_window_extent().height, plot


def test_plot_error_bars_are_the_verdicts_95_intervals_and_rows_sit_side_by_side(
    tmp_path, monkeypatch):
  table = grid_lib.Table('t', 'T', row='arm', col='pct', log_x=True)
  runs = [grid_lib.Run(f'{a}{p}{s}', 'x', dict(arm=a, pct=p, seed=s)) for a in 'ab'
          for p in (1, 10) for s in range(3)]
  accuracy = {0: .70, 1: .72, 2: .77}
  records_ = {r.name: dict(accuracy_test=accuracy[r.tags['seed']] + (r.tags['arm'] == 'b') / 10)
              for r in runs}
  ax = _captured_figure(monkeypatch, plots.plot_table, table, runs, records_,
                        str(tmp_path / 'p.png')).axes[0]
  _, low, high = report.t_interval([70., 72., 77.])
  for shift, container in zip((0, 10), ax.containers):  # Bars: each cell's verdict interval.
    (segments,) = [c.get_segments() for c in container.lines[2]]
    np.testing.assert_allclose([seg[:, 1] for seg in segments],
                               [[low + shift, high + shift]] * 2)
  xs = [list(c.lines[0].get_xdata()) for c in ax.containers]
  assert xs[0][0] < 1 < xs[1][0] and xs[0][1] < 10 < xs[1][1]  # Dodged around each column.
  assert 'bars: 95% interval' in ax.get_title()


def test_plots_leave_out_rows_without_a_finished_run_and_draw_lines_left_to_right(
    tmp_path, monkeypatch):
  table = grid_lib.Table('t', 'T', row='arm', col='lr', log_x=True, sort_cols=True)
  runs = [grid_lib.Run(f'{a}{lr}', 'x', dict(arm=a, lr=lr)) for a in 'ab' for lr in (5e-4, 1e-4)]
  records_ = {'a0.0005': dict(accuracy_test=.7), 'a0.0001': dict(accuracy_test=.6)}  # b: none.
  assert cells_lib.table_cells(table, runs)[1] == [1e-4, 5e-4]
  png = str(tmp_path / 'p.png')
  ax = _captured_figure(monkeypatch, plots.plot_table, table, runs, records_, png).axes[0]
  assert [c.get_label() for c in ax.containers] == ['a']  # Lines: 'b' has no finished run.
  line = ax.containers[0].lines[0]
  assert list(line.get_xdata()) == [1e-4, 5e-4] and list(line.get_ydata()) == [60., 70.]
  bars = dataclasses.replace(table, row='lr', col='arm')  # Bars: rows 5e-4 and 1e-4 only.
  runs.append(grid_lib.Run('c', 'x', dict(arm='a', lr=1.)))
  ax = _captured_figure(monkeypatch, plots.plot_table, bars, runs, records_, png).axes[0]
  assert [c.get_label() for c in ax.containers if not c.get_label().startswith('_')] == [
      '0.0005', '0.0001']
  assert ax.get_xlabel() == ''  # No column label: no axis label (not the tag's name, 'arm').
  labelled = dataclasses.replace(table, col_label='% of train: ')
  ax = _captured_figure(monkeypatch, plots.plot_table, labelled, runs, records_, png).axes[0]
  assert ax.get_xlabel() == '% of train'


def _compute_axis_labels(tmp_path, monkeypatch, *flops: float) -> Tuple[List[str], List[str]]:
  """The FLOPs axis's major labels shown by a compute plot of runs at `flops`, and its minor
  ticks' non-empty labels."""
  table = grid_lib.Table('t', 'T', row='arm', col='pct')
  runs = [grid_lib.Run(f'r{i}', 'x', dict(arm='a', pct=1)) for i in range(len(flops))]
  records_ = {f'r{i}': dict(accuracy_test=.7, train_flops=f) for i, f in enumerate(flops)}
  fig = _captured_figure(monkeypatch, plots.plot_compute, table, runs, records_,
                         str(tmp_path / 'c.png'))
  axis = fig.axes[0].xaxis
  low, high = fig.axes[0].get_xlim()
  return ([t.get_text() for x, t in zip(axis.get_majorticklocs(), axis.get_ticklabels())
           if low <= x <= high],  # Those shown.
          [t.get_text() for t in axis.get_ticklabels(minor=True) if t.get_text()])


def test_compute_plots_label_a_short_log_axis_at_1_2_5_and_leave_minor_ticks_bare(
    tmp_path, monkeypatch):
  """Matplotlib labels every minor tick of a log axis spanning under a decade or so: '3x10^12'
  ran into '4x10^12' on round 2's remedies plot."""
  labels, minor = _compute_axis_labels(tmp_path, monkeypatch, 2.1e12, 2.9e13)
  assert labels == [r'$2\times10^{12}$', r'$5\times10^{12}$', '$10^{13}$',
                    r'$2\times10^{13}$'], labels
  assert not minor


def test_round3_probes_give_the_strong_recipe_longer_and_evaluate_along_the_way():
  grid = grid_lib.load_grid(f'{ROUND3_GRID}:probe_steps=1:300+5:400+10:500,strong_probe_x=3')
  steps = {r.name: int(re.search(r'steps=(\d+)', r.command)[1]) for r in grid.runs}
  assert (steps['r3_vit_plain_p1_probe'], steps['r3_swin_strong_p1_probe'],
          steps['r3_vit_plain_p10_probe']) == (300, 900, 500)
  assert all('evals=10' in r.command for r in grid.runs)


def _block(content, marker):
  begin, end = report.doc_markers(marker)
  return content[content.index(begin) + len(begin) + 1:content.index(end)]


def _read_doc(name):
  with open(os.path.join(ROOT, 'docs', name)) as f:
    return f.read()


# An interval or a mean ± std as the page quotes them: points (2 decimals), relative error (%,
# 1 decimal) or logits (3 decimals).
QUOTED = re.compile(r'\[[−+]\d+\.\d+, [−+]\d+\.\d+\]|\d+\.\d\d ± \d+\.\d\d')


def _not_in_blocks(quotes, blocks):
  """The quotes no generated block shows (the blocks print ASCII minus, the prose −)."""
  signed = blocks.replace('-', '−')
  return [q for q in quotes if q not in signed]


def _accuracies_not_in(prose, block):
  """The accuracies (NN.NN%) a paragraph quotes that the block does not show."""
  return [a for a in re.findall(r'(\d+\.\d\d)%', prose) if a not in block]


def _compute_unnamed(claims, block, prose):
  """Each (claim, MFLOPs) of a claim's row compute in the block that the prose does not name."""
  missing = []
  for claim in claims:
    row = next(line for line in block.splitlines() if line.startswith(f'| {claim.text} |'))
    missing += [(claim.text, m) for m in re.findall(r': (\d+\.\d) ×', row)
                if f'{m} MFLOPs' not in prose]
  return missing


def test_the_study_page_opens_with_the_answers_of_round_4_then_round_3(tmp_path):
  """The page opens with round 4's answers, then round 3's (round 4's plan and block after them;
  round 2 on its own page); round 3's block (study3 markers) is generated from
  docs/study/round3/results.jsonl alone, and every interval and mean ± std the answers quote is
  in a generated block."""
  results = os.path.join('docs', 'study', 'round3', 'results.jsonl')
  content = _read_doc('small_data_study.md')
  headings = re.findall(r'^## (.*)$', content, re.M)
  assert [h.split(':')[0].split(',')[0] for h in headings[:3]] == [
      'Answers (round 4', 'Answers (round 3', 'Round 4 (issue 63)'], headings
  assert '<!-- study:begin -->' not in content and 'small_data_study_round2.md' in content
  block = _block(content, 'study3')
  by_name = records.read_results(os.path.join(ROOT, results))
  grid = grid_lib.fully_resolved(grid_lib.load_grid(ROUND3_GRID), by_name)
  assert block == report.report_markdown(grid, by_name, str(tmp_path), 'study/round3', results)
  assert set(by_name) <= {r.name for r in grid.runs}
  answers = content[content.index('## Answers (round 3'):content.index('## Round 4')]
  quoted = QUOTED.findall(answers)
  unshown = _not_in_blocks(quoted, block + _block(_read_doc('small_data_study_round2.md'), 'study'))
  assert len(quoted) > 40 and unshown == [], unshown
  # Every architecture claim gives both arms' compute beside it, as its claims row does.
  architecture = [c for c in grid.claims if c.text.startswith(('The hybrid beats', 'Swin beats'))]
  assert _compute_unnamed(architecture, block, answers) == []


def test_round4s_answers_quote_only_its_generated_block():
  """Every interval, mean ± std and accuracy round 4's answers quote is one a generated block
  shows (round 4's, or round 3's for the arms they compare with; each generated from its results
  alone, tests above), and each claim's row compute is named beside it: a rerun that moves a
  number cannot leave the answers behind."""
  content = _read_doc('small_data_study.md')
  answers = content[content.index('## Answers (round 4'):content.index('## Answers (round 3')]
  block = _block(content, 'study4') + _block(content, 'study3')
  quoted = QUOTED.findall(answers)
  assert len(quoted) >= 8 and _not_in_blocks(quoted, block) == []
  assert re.search(r'\d+\.\d\d%', answers) and _accuracies_not_in(answers, block) == []
  assert _compute_unnamed(grid_lib.load_grid(ROUND4_GRID).claims, block, answers) == []


def test_the_round4_section_is_its_plan_its_claims_and_its_estimate_until_it_runs(tmp_path):
  content = _read_doc('small_data_study.md')
  section = content[content.index('## Round 4'):content.index('## How round 3 ran')]
  results = os.path.join('docs', 'study', 'round4', 'results.jsonl')
  block = _block(content, 'study4')
  if not os.path.isfile(os.path.join(ROOT, results)):
    assert block == report.no_results_block(results)
  else:
    by_name = records.read_results(os.path.join(ROOT, results))
    grid = grid_lib.fully_resolved(grid_lib.load_grid(ROUND4_GRID), by_name)
    assert block == report.report_markdown(grid, by_name, str(tmp_path), 'study/round4', results)
  prose = ' '.join(section.split())
  for claim in grid_lib.load_grid(ROUND4_GRID).claims:  # Each pre-registered claim, verbatim.
    assert ' '.join(claim.text.split()) in prose, claim.text
  printed = io.StringIO()
  with contextlib.redirect_stdout(printed):
    round4_estimate.print_table('kind_lr=')  # As pre-registered: every lr x every kind.
    round4_estimate.print_table('')  # The sweep narrowed on 2026-12-02.
  tables = printed.getvalue().strip().split('\n| stage')
  assert tables[0] in section and '| stage' + tables[1] in section  # The script's tables.


def test_round4s_summary_quotes_accuracies_of_its_generated_block():
  """Each accuracy the round's "Where it stands" paragraph quotes (NN.NN%) is one its block
  shows: a rerun or a corrected record that changes a number cannot leave the prose behind."""
  content = _read_doc('small_data_study.md')
  start = content.index('**Where it stands.**')
  summary = content[start:content.index('<!-- study4:begin -->')]
  block = _block(content, 'study4')
  assert len(re.findall(r'\d+\.\d\d%', summary)) >= 8 and _accuracies_not_in(summary, block) == []


def test_the_rope_section_is_its_claims_and_its_generated_block():
  content = _read_doc('small_data_study.md')
  section = content[content.index("## RoPE beside round 3's"):content.index('## How round 3 ran')]
  results = os.path.join('docs', 'study', 'rope', 'results.jsonl')
  grid = grid_lib.load_grid(ROPE_GRID)
  block = _block(content, 'study_rope')
  if not os.path.isfile(os.path.join(ROOT, results)):
    assert block == report.no_results_block(results)
  else:
    by_name = records.read_results(os.path.join(ROOT, results))
    with tempfile.TemporaryDirectory() as tmp:
      assert block == report.report_markdown(grid, by_name, tmp, 'study/rope', results)
  prose = ' '.join(section.split())
  for claim in grid.claims:  # Each pre-registered claim, verbatim.
    assert ' '.join(claim.text.split()) in prose, claim.text
  # Round 3's plain ViT choice at 1%, its five kinds' recipe: rope and rope_mixed beside learn.
  commands = {r.tags['posemb']: r.command for r in grid.runs if r.tags['seed'] == 0}
  assert set(commands) == {'learn', 'rope', 'rope_mixed'}
  assert all('pct=1,seed=0,remedy=none,steps=1500,lr=5e-4,wd=0.05' in c for c in commands.values())
  assert len(grid.runs) == 9 and grid.fewshot == fashion_mnist_round3.FEWSHOT


@pytest.mark.skipif(not claim_history.has_history(), reason='needs the checkout\'s git history')
@pytest.mark.parametrize('grid_file, results', [
    ('fashion_mnist_grid.py', 'docs/study/results.jsonl'),
    ('fashion_mnist_round3.py', 'docs/study/round3/results.jsonl'),
    ('fashion_mnist_round4.py', 'docs/study/round4/results.jsonl'),
    ('fashion_mnist_rope.py', 'docs/study/rope/results.jsonl')])
def test_each_claim_says_when_it_was_written_as_git_shows_it(grid_file, results):
  """A claim's `written` date and `recorded_then` count are those of the commit that added it
  (a claim not committed yet: today's plan, before its runs)."""
  history = claim_history.history(f'research/small_data/{grid_file}', results)
  found = {claim.text: (date, recorded, total) for claim, date, recorded, total in history}
  assert not claim_history.check([claim for claim, *_ in history], found)
  for claim, *_ in history:  # A revision's date is git's too (a reworded claim: its rewording).
    if claim.revised and claim.registered_as:
      current = claim_history.first_written(
          dataclasses.replace(claim, registered_as=''),
          claim_history.versions(f'research/small_data/{grid_file}'))
      assert current is None or current.date in claim.revised, claim.text


def test_claims_give_relative_error_logits_and_each_rows_compute():
  table = grid_lib.Table('t', 'T', row='arm', col='pct')
  runs = [grid_lib.Run(f'{a}{s}', 'x', dict(arm=a, pct=1, seed=s)) for a in 'ab' for s in range(3)]
  accuracy = {'a': (.80, .82, .84), 'b': (.70, .72, .74)}
  records_ = {r.name: dict(accuracy_test=accuracy[r.tags['arm']][r.tags['seed']], steps=900,
                           forward_flops=19e6 if r.tags['arm'] == 'a' else 62e6)
              for r in runs}
  claim = grid_lib.difference_claim('a beats b', 't', 'a', 'b', 1, written='2026-11-29',
                                    recorded_then=0)
  grid = grid_lib.Grid(runs=runs, tables=(table,), claims=(claim,))
  ratios = np.log([20 / 30, 18 / 28, 16 / 26])
  assert report.claim_effects(claim, table, runs, records_, report.log_error) == pytest.approx(
      ratios)
  row = report.claims_markdown(grid, records_).splitlines()[-1]
  assert row.endswith('| a: 19.0 × 900; b: 62.0 × 900 | 2026-11-29, before its runs |'), row
  relative = report.relative_markdown(grid, records_).splitlines()[-1]
  assert relative.startswith(f'| a beats b | {100 * (np.exp(ratios.mean()) - 1):+.1f} | ')
  assert relative.count('supported') == 2  # Fewer errors, a higher logit: both scales agree.
  target = dataclasses.replace(claim, terms=((1, 'a'),), target=80.)
  assert report.claim_effects(target, table, runs, records_) == pytest.approx([0., 2., 4.])
  deltas = report.paired_deltas(dataclasses.replace(table, baseline='b'), runs, records_)
  assert deltas.splitlines()[-1].endswith(
      f'+10.00 ± 0.00 (3 of 3 > 0); error {100 * (np.exp(ratios.mean()) - 1):+.1f}% |')


def test_the_round3_estimate_adds_each_stage_at_half_the_probe_as_budget():
  got = round3_estimate.estimate_seconds(
      'seeds=3,lrs=1e-3+2e-3,wds=0.05,probe_steps=1:100+5:100+10:100,strong_probe_x=2',
      rates=collections.defaultdict(lambda: 1.), posemb_factor={'relative': 2.},
      ssl_rates={'mae': 1., 'mpp': 2.})
  probes = 4 * 100 + 4 * 200 + 100 + 100  # Plain and strong at 1%, the plain ViT at 5%, 10%.
  # MAE 15 epochs of the 60k images at batch 256, MPP 10; each fine-tunes 3 seeds of 50 steps.
  assert got == dict(probe=probes, sweep=2 * probes / 2, seeds=2 * probes / 2,
                     posemb=2 * 3 * 50 * (1 + 1 + 1 + 2),  # 1% and 5%, three seeds.
                     ssl=3515 * 1. + 2343 * 2. + 2 * 3 * 50,
                     full=full_recipe_epochs.estimate_seconds(full_recipe_epochs.EPOCHS))


def test_round3_full_part_chooses_the_epochs_on_validation_then_trains_on_all_of_train():
  grid = grid_lib.load_grid(f'{ROUND3_GRID}:parts=full,full_epochs=2+4')
  records_ = {}
  while not [r for r in grid.runs if r.tags.get('arm') == 'full_val']:
    _finish(grid, records_, lambda run: .7)
    grid = grid.resolve(records_)
  # Only once the ViT's arms (every part reads them) have chosen: with their seeds, before them.
  assert {'r3_vit_plain_p1_s2', 'r3_vit_strong_p1_s2'} <= {r.name for r in grid.runs[:-2]}
  candidates = [r for r in grid.runs if r.tags.get('arm') == 'full_val']
  assert [r.name for r in grid.runs[-2:]] == ['r3_full_e2_val', 'r3_full_e4_val'] == [
      r.name for r in candidates]  # Last: the longest runs.
  val_pct = config_lib.load_config_module(STUDY_CONFIG_FILE).VAL_PCT
  assert all(f'--config.pp.train=train[:{100 - val_pct}%] --config.pp.val=train[{100 - val_pct}%:]'
             in r.command and 'fashion_mnist_full.py:pretrain ' in r.command for r in candidates)
  _finish(grid, records_, lambda run: .8)
  records_['r3_full_e4_val'].update(finished=False)  # Not every candidate in: no choice yet.
  assert not [r for r in grid.resolve(records_).runs if r.tags.get('arm') == 'full']
  records_['r3_full_e2_val'].update(accuracy_val=.80, accuracy_test=.99)  # Test is never read.
  records_['r3_full_e4_val'].update(finished=True, accuracy_val=.85, accuracy_test=.50)
  final = grid.resolve(records_).runs[-1]
  assert final.name == 'r3_full_e4' and final.tags == dict(
      arm='full', full=full_recipe_epochs.FINAL_ROW, epochs=4)
  assert final.command.endswith('fashion_mnist_full.py:pretrain --config.num_epochs=4')
  assert full_recipe_epochs.estimate_seconds('2+4', rate=1.) == pytest.approx(
      (2 + 4) * 54_000 / 128 + 4 * 60_000 / 128)
  with pytest.raises(ValueError, match=r'Bad full_epochs=2\+x'):
    grid_lib.load_grid(f'{ROUND3_GRID}:parts=full,full_epochs=2+x')


def test_round3_parts_pick_their_arms():
  names = lambda arg: {r.name for r in grid_lib.load_grid(f'{ROUND3_GRID}:{arg}').runs}  # noqa: E731
  assert len(names('parts=matched')) == 8 and 'r3_vit_plain_p10_probe' not in names(
      'parts=matched')
  assert names('parts=tenx') == {'r3_vit_plain_p1_probe', 'r3_vit_strong_p1_probe',
                                 'r3_vit_plain_p10_probe'}
  with pytest.raises(ValueError, match=r"Unknown part 'mim' in parts=matched\+mim"):
    grid_lib.load_grid(f'{ROUND3_GRID}:parts=matched+mim')
  # models= keeps the matched part to some models; the ViT's arms always run (others read them).
  assert names('models=resnet,parts=matched') == {
      f'r3_{m}_{r}_p1_probe' for m in ('vit', 'resnet') for r in ('plain', 'strong')}
  with pytest.raises(ValueError, match=r"Unknown model 'deit' in models=vit\+deit"):
    grid_lib.load_grid(f'{ROUND3_GRID}:models=vit+deit')


# Stands in for a trainer that runs until told to stop: says it started, then on SIGTERM
# writes 'stopped' (the trainer's checkpoint) and exits 143, as vit_jax.main does.
PATIENT_TRAINER = '''
import os, signal, sys, time
workdir = sys.argv[-1].split('=', 1)[1]
os.makedirs(workdir, exist_ok=True)
def stop(signum, frame):
  open(os.path.join(workdir, 'stopped'), 'w').write(str(signum))
  sys.exit(143)
signal.signal(signal.SIGTERM, stop)
open(os.path.join(workdir, 'started'), 'w').close()
time.sleep(120)
'''


@pytest.mark.parametrize('signame', ['SIGTERM', 'SIGINT'])
def test_a_background_runner_stopped_by_kill_stops_its_trainer_at_a_checkpoint(
    tmp_path, signame):
  """`kill` (or `kill -INT`) of a runner started with `&` from a script: the trainer gets
  SIGTERM (it checkpoints), the attempt is recorded with its exit code, the runner ends."""
  import signal  # pylint: disable=g-import-not-at-top
  trainer = tmp_path / 'trainer.py'
  trainer.write_text(PATIENT_TRAINER)
  grid_file = tmp_path / 'grid.py'
  grid_file.write_text('from research.small_data import grid\n'
                       'def get_grid(arg):\n'
                       f'  return grid.Grid(runs=[grid.Run("a", "python {trainer}")])\n')
  out = tmp_path / 'out'
  # SIGINT ignored, as bash starts a background job of a non-interactive shell.
  runner_argv = [sys.executable, '-m', 'research.small_data', f'--grid={grid_file}',
                 f'--out={out}']
  proc = subprocess.Popen(['sh', '-c', 'trap "" INT; exec "$@"', 'sh', *runner_argv], cwd=ROOT,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
  try:
    deadline = time.time() + 120
    while (not (out / 'a' / 'started').exists() and proc.poll() is None
           and time.time() < deadline):
      time.sleep(0.2)
    assert (out / 'a' / 'started').exists(), proc.communicate()[0]
    proc.send_signal(getattr(signal, signame))
    output, _ = proc.communicate(timeout=60)
  finally:
    proc.kill()
  assert proc.returncode != 0, output
  assert (out / 'a' / 'stopped').read_text() == str(int(signal.SIGTERM)), output
  attempt, = json.loads((out / 'a' / records.STATE_FILE).read_text())['attempts']
  assert attempt['returncode'] == 143 and 'Traceback' not in output, output
  assert 'stopped' in output.lower(), output


# Stands in for the interpreter: `-m vit_jax.fewshot` prints a measurement (counting its calls
# in the checkpoint's directory; one line on stderr and exit 1 where a 'broken' file is);
# anything else runs in Python.
FAKE_PYTHON = '''#!/bin/sh
if [ "$2" = vit_jax.fewshot ]; then
  dir=${3#--checkpoint=}
  echo x >> "$dir/fewshot_calls"
  if [ -e "$dir/broken" ]; then echo "Error: broken" >&2; exit 1; fi
  if [ -e "$dir/garbled" ]; then echo "not JSON"; exit 0; fi
  echo '{"results": [{"shots": 1, "mean": 0.25}, {"shots": 10, "mean": 0.5}]}'
  exit 0
fi
exec %s "$@"
'''


def test_every_finished_run_gets_its_encoders_few_shot_measured_once_per_params(
    tmp_path, fake_trainer, monkeypatch):
  monkeypatch.setattr(records, 'forward_flops', lambda meta: (1e6, 'test'))
  python = tmp_path / 'python'
  python.write_text(FAKE_PYTHON % sys.executable)
  python.chmod(0o755)
  out, results = tmp_path / 'out', tmp_path / 'results.jsonl'
  fewshot = grid_lib.FewShot('{out}/data', train_split='train[90%:]')
  grid = grid_lib.Grid(runs=[grid_lib.Run('a', f'python {fake_trainer} 0.5 1'),
                             grid_lib.Run('b', f'python {fake_trainer} 0.7 2')],
                       fewshot=fewshot)
  fewshot_calls = lambda name: len((out / name / 'fewshot_calls').read_text().split())  # noqa: E731
  lines = []
  assert runner.run_grid(grid, str(out), python=str(python), log=lines.append,
                         results=str(results)) == ['b']
  got = records.read_results(str(results))
  assert (got['a']['fewshot_1shot'], got['a']['fewshot_10shot']) == (.25, .5)
  assert 'fewshot_1shot' not in got['b'] and not (out / 'b' / 'fewshot_calls').exists()
  assert got['a']['fewshot_command'] == (f'python -m vit_jax.fewshot --checkpoint={out}/a '
                                         f"--dataset={out}/data '--train_split=train[90%:]' --json")
  (out / 'b' / 'broken').touch()  # b finishes; its measurement fails: a line, b stays done.
  lines.clear()
  assert runner.run_grid(grid, str(out), python=str(python), log=lines.append,
                         results=str(results)) == []
  assert any(line.startswith('b: few-shot FAILED (1); see ') for line in lines), lines
  assert 'Error: broken' in (out / 'b' / runner.LOG_FILE).read_text()
  got = records.read_results(str(results))
  assert got['b']['finished'] and 'fewshot_1shot' not in got['b']
  assert (fewshot_calls('a'), fewshot_calls('b')) == (1, 1)
  (out / 'b' / 'broken').unlink()
  (out / 'b' / 'garbled').touch()  # Output that is not the tool's JSON: a failure, logged.
  lines.clear()
  runner.run_grid(grid, str(out), python=str(python), log=lines.append, results=str(results))
  assert any(line.startswith('b: few-shot FAILED (0); see ') for line in lines), lines
  assert 'not JSON' in (out / 'b' / runner.LOG_FILE).read_text()
  (out / 'b' / 'garbled').unlink()
  runner.run_grid(grid, str(out), python=str(python), log=lambda _: None, results=str(results))
  assert records.read_results(str(results))['b']['fewshot_10shot'] == .5
  # New params (the run made again) or another measurement: measured again.
  time.sleep(0.01)
  (out / 'a' / 'params.npz').write_text('new')
  assert 'fewshot_1shot' not in records.run_record(grid.runs[0], str(out))
  other = dataclasses.replace(grid, fewshot=dataclasses.replace(fewshot, args=('--shots=1',)))
  for g in (grid, other):
    runner.run_grid(g, str(out), python=str(python), log=lambda _: None, results=str(results))
  assert (fewshot_calls('a'), fewshot_calls('b')) == (3, 4)
  assert records.read_results(str(results))['b']['fewshot_command'].endswith('--shots=1 --json')


def test_round3_last_parts_run_under_a_narrower_grid_stay_in_the_whole_rounds_grid():
  # The ssl and full parts ran under models=vit+resnet while hybrid and Swin had not chosen: the
  # whole round's grid (the report's) keeps them, after the other models' arms still to run.
  records_ = {}
  grid = grid_lib.load_grid(ROUND3_GRID + ':models=vit+resnet')
  for _ in range(5):
    _finish(grid, records_, lambda run: .7)
    grid = grid.resolve(records_)
  last = [r.name for r in grid.runs if r.tags.get('arm', '').startswith(('ssl', 'full'))]
  assert len(last) == 2 * 4 + 3 and all(name in records_ for name in last)
  whole = grid_lib.fully_resolved(grid_lib.load_grid(ROUND3_GRID), records_)
  names = [r.name for r in whole.runs]
  assert names[-len(last):] == last
  waiting = [n for n in names if n not in records_]
  assert waiting and all(n.startswith(('r3_hybrid28_', 'r3_swin_')) for n in waiting)
  # Before any of its runs has a record, a last part waits for every arm's choice.
  del records_['r3_full_e11_val'], records_['r3_full_e22_val']
  del records_[last[-1]]
  whole = grid_lib.fully_resolved(grid_lib.load_grid(ROUND3_GRID), records_)
  assert not any(r.tags.get('arm', '').startswith('full') for r in whole.runs)


def test_round3_ssl_fine_tunes_the_plain_vits_choice_from_each_encoder_once_all_are_chosen():
  records_ = {}
  grid = grid_lib.load_grid(ROUND3_GRID)
  _finish(grid, records_, lambda run: .7)
  grid = grid.resolve(records_)
  sweeps = [r for r in grid.runs if r.tags.get('arm') == 'sweep']
  best = lambda run: .8 if run.tags.get('lr') == '1.5e-3' else .7  # noqa: E731
  assert sweeps[0].name.startswith('r3_vit_plain_p1_s0_')
  _finish(grid_lib.Grid(runs=sweeps[:3]), records_, best)  # Only the plain ViT at 1% chose.
  grid = grid.resolve(records_)
  assert 'r3_vit_plain_p1_s1' in {r.name for r in grid.runs}
  assert not any(r.tags.get('arm', '').startswith('ssl') for r in grid.runs)
  _finish(grid, records_, best)
  grid = grid_lib.fully_resolved(grid, records_)
  ssl = [r for r in grid.runs if r.tags.get('arm', '').startswith('ssl')]
  full = [r for r in grid.runs if r.tags.get('arm', '').startswith('full')]
  # Last but the full-data recipe's runs (hours each): after every other part's runs.
  assert grid.runs[-len(ssl) - len(full):len(grid.runs) - len(full)] == ssl and len(full) == 2
  scratch = {r.name: r for r in grid.runs if r.tags.get('init') == 'scratch' and r.tags['chosen']}
  assert set(scratch) == {'r3_vit_plain_p1_s0_lr1.5e-3_wd0.05', 'r3_vit_plain_p1_s1',
                          'r3_vit_plain_p1_s2'}
  for method in ('mae', 'mpp'):
    pretrain = next(r for r in ssl if r.name == f'r3_{method}_pretrain')
    assert pretrain.command.endswith(f'fashion_mnist_ssl.py:{method},stage1,patch=7')
    for s in range(3):  # Only the start differs from the scratch row of the same slice.
      tuned = next(r for r in ssl if r.name == f'r3_vit_{method}_p1_s{s}')
      base = next(r for r in scratch.values() if r.tags['seed'] == s)
      assert tuned.command == base.command + (
          f' --config.pretrained_path={{out}}/r3_{method}_pretrain')
      assert tuned.tags['init'] == f'{method.upper()} encoder' and tuned.tags['chosen']
  # The fine-tunes are rows of the ssl table only: the matched and position-embedding tables'
  # plain ViT at 1% is the scratch arm alone.
  by_name = {t.name: t for t in grid.tables}
  for table, cell in (('r3_matched', ('ViT plain', 1)), ('r3_posemb', ('learn', 1)),
                      ('r3_ssl', ('scratch', 1))):
    assert set(cells_lib.table_cells(by_name[table], grid.runs)[2][cell]) == set(scratch)
  assert cells_lib.table_cells(by_name['r3_ssl'], grid.runs)[2][('MAE encoder', 1)] == [
      f'r3_vit_mae_p1_s{s}' for s in range(3)]
  # The pretrained encoder has the fine-tuned model's parameter tree.
  ssl_config = config_lib.load_config_module(os.path.join(ROOT, 'configs',
                                                          'fashion_mnist_ssl.py'))
  encoder = ssl_config.get_config('mae,stage1,patch=7').model.to_dict()
  study = STUDY_CONFIG.get_config('model=vit,pct=1').model.to_dict()
  differ = {k for k in encoder.keys() | study.keys() if encoder.get(k) != study.get(k)}
  assert differ <= {'model_name', 'name', 'attention_impl'}, differ
  with pytest.raises(ValueError, match=r'patch=4 or 7\), got .mae,patch=5'):
    ssl_config.get_config('mae,patch=5')


def test_a_label_free_pretraining_run_records_its_loss_not_accuracies_or_flops(tmp_path):
  out = tmp_path / 'out'
  fake_run_dir(out, 'mae', None, self_supervised=dict(method='mae', loss_test=.25))
  meta = json.loads((out / 'mae' / 'metadata.json').read_text())
  del meta['accuracy'], meta['num_examples']
  (out / 'mae' / 'metadata.json').write_text(json.dumps(dict(meta, num_classes=0)))
  record = records.run_record(grid_lib.Run('mae', 'python x'), str(out))
  assert record['finished'] and record['loss_test'] == .25
  assert record['accuracy_test'] is None and record['train_flops'] is None
  assert '| mae |  |  |  | 100 | 12800 |' in report.runs_markdown(
      [grid_lib.Run('mae', 'python x')], {'mae': record})


ROUND4_GRID = os.path.join(ROOT, 'research', 'small_data', 'fashion_mnist_round4.py')
ROPE_GRID = os.path.join(ROOT, 'research', 'small_data', 'fashion_mnist_rope.py')
ROUND4_CANDIDATES = ('r4_hybrid_p1_probe', 'r4_swin_p1_probe', 'r4_vit_mae_p1_probe')


def test_round4_starts_from_round3s_choices_and_distils_from_the_teacher_of_each_slice():
  grid = grid_lib.load_grid(ROUND4_GRID)
  assert [r.name for r in grid.runs] == [
      'r4_resnet_strong_p1_s0', 'r4_resnet_strong_p1_s1', 'r4_resnet_strong_p1_s2',
      'r4_mae_pretrain', *ROUND4_CANDIDATES, 'r4_resnet_distill_p1_probe']
  # The teachers are round 3's strong ResNet as it chose it, slice for slice.
  round3 = records.read_results(os.path.join(ROOT, 'docs', 'study', 'round3', 'results.jsonl'))
  for s in range(3):
    r3 = next(r for r in round3.values() if r['tags'].get('row') == 'ResNet strong'
              and r['tags']['seed'] == s and r['tags'].get('chosen'))
    mine = next(r for r in grid.runs if r.name == f'r4_resnet_strong_p1_s{s}')
    assert r3['command'].split(' --workdir=')[0] == mine.command.replace('{out}', 'runs/study3')
  probes = {r.name: r.command for r in grid.runs if r.name.endswith('_probe')}
  for command in probes.values():  # Seed 0's teacher, hard, at the round-3 arm's lr.
    assert ('seed=0,' in command and 'steps=6000,' in command and 'evals=10' in command
            and '--config.distill.kind=hard' in command)
    assert command.count('--config.distill.teacher_path={out}/r4_resnet_strong_p1_s0/') == 1
  assert 'lr=1.5e-3' in probes['r4_hybrid_p1_probe'] and 'lr=4e-3' in probes['r4_swin_p1_probe']
  # A distillation token where the model has one from scratch; MAE's encoder has none to load.
  assert ['--config.model.distilled=True' in c for c in probes.values()] == [
      True, False, False, False]
  assert probes['r4_vit_mae_p1_probe'].endswith(' --config.pretrained_path={out}/r4_mae_pretrain')
  with pytest.raises(ValueError, match=r"Unknown candidate 'deit' in candidates=hybrid\+deit"):
    grid_lib.load_grid(f'{ROUND4_GRID}:candidates=hybrid+deit')


def test_round4_chooses_the_recipe_then_lr_and_kind_on_validation_and_gives_the_resnet_the_same():
  grid = grid_lib.load_grid(f'{ROUND4_GRID}:kind_lr=,fair_sweep=always')  # As pre-registered.
  records_ = {}
  probe_val = {'r4_hybrid_p1_probe': .71, 'r4_swin_p1_probe': .74, 'r4_vit_mae_p1_probe': .72}
  _finish(grid, records_, lambda run: probe_val.get(run.name, .7))
  grid = grid.resolve(records_)
  sweep = [r for r in grid.runs if r.tags.get('arm') == 'sweep']  # Swin's: the best probe.
  assert {(r.tags['lr'], r.tags['kind']) for r in sweep} == {
      (lr, k) for lr in ('5e-4', '1.5e-3', '4e-3') for k in ('hard', 'soft')}
  assert all(r.name.startswith('r4_swin_p1_s0_') and 'steps=500,' in r.command for r in sweep)
  assert all('--config.distill.temperature=4' in r.command for r in sweep
             if r.tags['kind'] == 'soft')
  # The choice reads validation only: 1.5e-3 soft, though its test accuracy is the lowest.
  best = lambda run: .9 if run.tags.get('lr') == '1.5e-3' and run.tags.get('kind') == 'soft' else .8  # noqa: E731,E501
  _finish(grid, records_, best)
  records_['r4_swin_p1_s0_lr1.5e-3_soft']['accuracy_test'] = .1
  grid = grid_lib.fully_resolved(grid, records_)
  names = [r.name for r in grid.runs]
  seeds = [r for r in grid.runs if r.name in ('r4_swin_p1_s1', 'r4_swin_p1_s2')]
  assert all('lr=1.5e-3' in r.command and '--config.distill.kind=soft' in r.command
             and f'r4_resnet_strong_p1_s{r.tags["seed"]}/params.npz' in r.command for r in seeds)
  fair = [r for r in grid.runs if r.name.startswith('r4_resnet_distill_p1_s0_')]
  assert len(fair) == 3 and all(r.tags['kind'] == 'soft' for r in fair)  # The ViT's kind.
  assert names.index('r4_swin_p1_s2') < names.index(fair[0].name)
  _finish(grid, records_, best)
  grid = grid_lib.fully_resolved(grid, records_)
  assert 'r4_resnet_distill_p1_s2' in {r.name for r in grid.runs}
  _finish(grid, records_, best)
  tables = {t.name: t for t in grid.tables}
  for claim in grid.claims:  # The 1% claims have their three slices; the full part, none.
    slices = len(report.claim_effects(claim, tables[claim.table], grid.runs, records_))
    assert slices == (0 if claim.table == 'r4_full' else 3), claim.text
  assert all(c.written == '2026-11-29' and c.recorded_then == 0 for c in grid.claims)
  assert not [r for r in grid.runs if r.name.startswith('r4_full_')]  # Not a default part.


def test_round4_compares_the_kinds_at_one_lr_then_sweeps_the_lrs_at_the_chosen_kind():
  """The sweep as narrowed on 2026-12-02: hard and soft at lr 5e-4 (the runs made under the
  cross keep their names), then the other lrs and the edge at the kind chosen there only."""
  grid = grid_lib.load_grid(ROUND4_GRID)
  records_ = {}
  _finish(grid, records_, lambda run: .74 if run.name == 'r4_hybrid_p1_probe' else .7)
  grid = grid.resolve(records_)
  sweep = lambda g: sorted(r.name for r in g.runs if r.tags.get('arm') == 'sweep')  # noqa: E731
  assert sweep(grid) == ['r4_hybrid_p1_s0_lr5e-4_hard', 'r4_hybrid_p1_s0_lr5e-4_soft']
  val = {'r4_hybrid_p1_s0_lr5e-4_soft': .80, 'r4_hybrid_p1_s0_lr4e-3_soft': .83,
         'r4_hybrid_p1_s0_lr1.07e-2_soft': .81}
  _finish(grid, records_, lambda run: val.get(run.name, .79))
  grid = grid.resolve(records_)
  assert sweep(grid) == ['r4_hybrid_p1_s0_lr1.5e-3_soft', 'r4_hybrid_p1_s0_lr4e-3_soft',
                         'r4_hybrid_p1_s0_lr5e-4_hard', 'r4_hybrid_p1_s0_lr5e-4_soft']
  _finish(grid, records_, lambda run: val.get(run.name, .79))
  grid = grid.resolve(records_)  # 4e-3 is the edge: one run past it, soft only.
  assert sweep(grid)[:2] == ['r4_hybrid_p1_s0_lr1.07e-2_soft', 'r4_hybrid_p1_s0_lr1.5e-3_soft']
  assert len(sweep(grid)) == 5
  grid = grid_lib.fully_resolved(grid, records_)
  _finish(grid, records_, lambda run: val.get(run.name, .79))
  grid = grid_lib.fully_resolved(grid, records_)
  chosen = [r.name for r in grid.runs if r.tags.get('arm') == 'sweep' and r.tags['chosen']]
  assert chosen == ['r4_hybrid_p1_s0_lr4e-3_soft']
  seeds = [r for r in grid.runs if r.name in ('r4_hybrid_p1_s1', 'r4_hybrid_p1_s2')]
  assert len(seeds) == 2 and all('lr=4e-3' in r.command and 'kind=soft' in r.command
                                 for r in seeds)
  # The fair ResNet first runs round 3's lr for it (4e-3) alone, at the chosen kind; it sweeps
  # the other lrs only if the combined recipe (83% validation) is not below it.
  fair_runs = lambda g: sorted(r.name for r in g.runs  # noqa: E731
                               if r.name.startswith('r4_resnet_distill_p1_s'))
  assert fair_runs(grid) == ['r4_resnet_distill_p1_s0_lr4e-3_soft']
  for resnet, expected in ((.85, ['r4_resnet_distill_p1_s0_lr4e-3_soft',
                                  'r4_resnet_distill_p1_s1', 'r4_resnet_distill_p1_s2']),
                           (.83, ['r4_resnet_distill_p1_s0_lr1.5e-3_soft',
                                  'r4_resnet_distill_p1_s0_lr4e-3_soft',
                                  'r4_resnet_distill_p1_s0_lr5e-4_soft'])):
    ahead = dict(records_)
    _finish(grid_lib.Grid(runs=[r for r in grid.runs if r.name.startswith('r4_resnet_d')]),
            ahead, lambda run, val=resnet: val)
    assert fair_runs(grid_lib.fully_resolved(grid, ahead)) == expected, resnet
  first = next(r for r in grid_lib.fully_resolved(grid, ahead).runs
               if r.name == 'r4_resnet_distill_p1_s0_lr4e-3_soft')
  assert 'lr=4e-3,' in first.command and '--config.distill.kind=soft' in first.command
  # Where `lrs` lacks round 3's lr, the sweep still holds the run made at it first.
  opts = dict(fashion_mnist_round4.parse('lrs=5e-4+1.5e-3')[0])
  made = {'r4_resnet_distill_p1_s0_lr4e-3_soft': dict(finished=True, accuracy_val=.83),
          'r4_hybrid_p1_s0_lr5e-4_soft': dict(finished=True, accuracy_val=.84)}
  fair_opts = fashion_mnist_round4.fair_options(opts, made, 1, 'soft',
                                                'r4_hybrid_p1_s0_lr5e-4_soft')
  assert fair_opts['lrs'] == '5e-4+1.5e-3+4e-3' and fair_opts['lr_edge'] == '1'
  made['r4_hybrid_p1_s0_lr5e-4_soft']['accuracy_val'] = .82  # The ViT behind: 4e-3 alone.
  assert fashion_mnist_round4.fair_options(opts, made, 1, 'soft', 'r4_hybrid_p1_s0_lr5e-4_soft'
                                           )['lrs'] == '4e-3'
  with pytest.raises(ValueError, match=r'kind_lr=1e-3 is not one of lrs=5e-4\+1.5e-3\+4e-3'):
    grid_lib.load_grid(f'{ROUND4_GRID}:kind_lr=1e-3')
  with pytest.raises(ValueError, match='Unknown fair_sweep=never; use one of always, '
                     'if_vit_ahead.'):
    grid_lib.load_grid(f'{ROUND4_GRID}:fair_sweep=never')


def test_round4_full_part_chooses_arm_augmentation_and_epochs_on_validation_beside_resnet18():
  arg = 'parts=combined+full,full_archs=hybrid56+swin28,full_epochs=2+4'
  grid = grid_lib.load_grid(f'{ROUND4_GRID}:{arg}')
  screen = [r for r in grid.runs if r.tags.get('arm') == 'full_val']
  assert [r.name for r in screen] == [f'r4_full_{a}_{g}_e2_val' for a in ('hybrid56', 'swin28')
                                      for g in ('flip', 'strong')]
  assert all(r.command.endswith('split=val') for r in screen)
  records_ = {}
  _finish(grid_lib.Grid(runs=screen), records_,
          lambda run: .9 if run.name == 'r4_full_hybrid56_strong_e2_val' else .8)
  grid = grid.resolve(records_)
  later = [r.name for r in grid.runs if r.tags.get('arm') == 'full_val'][4:]
  assert later == ['r4_full_hybrid56_strong_e4_val', 'r4_full_resnet18_strong_e2_val',
                   'r4_full_resnet18_strong_e4_val']
  resnet = next(r for r in grid.runs if r.name == 'r4_full_resnet18_strong_e4_val')
  assert 'arch=resnet18,aug=strong,epochs=4,size=56,split=val' in resnet.command
  _finish(grid_lib.Grid(runs=[r for r in grid.runs if r.tags.get('arm') == 'full_val']),
          records_, lambda run: .95 if 'e4' in run.name else .8)
  grid = grid.resolve(records_)
  finals = {r.name: r.command for r in grid.runs if r.tags.get('arm') == 'full'}
  assert set(finals) == {f'r4_full_{n}_s{s}' for n in ('vit', 'resnet18') for s in range(3)}
  assert finals['r4_full_vit_s1'].endswith('arch=hybrid56,aug=strong,epochs=4,seed=1')
  # The students wait for the 1% part's distillation kind, then learn from their ResNet-18.
  for _ in range(4):  # Probes, the kinds, the lrs, the seeds of the 1% part.
    _finish(grid, records_, lambda run: .9 if run.tags.get('lr') == '4e-3' else .8)
    grid = grid_lib.fully_resolved(grid, records_)
  student = next(r for r in grid.runs if r.name == 'r4_full_student_s2')
  assert student.command.endswith('distill=hard,seed=2 --config.distill.teacher_path={out}/'
                                  'r4_full_resnet18_s2/params.npz')
  alone = grid_lib.fully_resolved(grid_lib.load_grid(f'{ROUND4_GRID}:parts=full'), {})
  assert {r.name for r in alone.runs} == {f'r4_full_{a}_{g}_e22_val' for a in (
      'hybrid56', 'swin28') for g in ('flip', 'strong')}


def test_round4_estimate_adds_its_stages_from_the_rates():
  rates = round4_estimate.Rates(
      step=collections.defaultdict(lambda: 1.), probe=collections.defaultdict(lambda: 2.),
      teacher=.5, mae=100., full=3., resnet_flops=round4_estimate.RESNET18_FLOPS / 10,
      budget_share=collections.defaultdict(lambda: .5))
  got = round4_estimate.estimate_seconds('probe_steps=100,kind_lr=', rates)
  run = 1.5 * 50  # A distilled step (1 + 0.5 s) at half the probe.
  assert got == dict(teachers=3 * 1. * 4200, mae=100., probes=4 * 2.5 * 100,
                     sweep=3 * 2 * run, edge=2 * run, seeds=2 * run, fair_sweep=4 * run,
                     fair_seeds=2 * run, fewshot=(3 + 4 + 4 * 2 + 2 + 4 + 2) * 30.)
  # The kinds compared at one lr first: 2 + 3 - 1 sweep runs and one edge run, not 6 and 2.
  narrowed = round4_estimate.estimate_seconds('probe_steps=100', rates)
  assert narrowed == dict(got, sweep=4 * run, edge=run, fewshot=(3 + 4 + 4 + 1 + 2 + 4 + 2) * 30.)
  full = round4_estimate.estimate_seconds('parts=full,full_epochs=1+2', rates)
  r18 = 1. * 10 * 4  # The ResNet's step x 10 by FLOPs x 4 at 56px.
  assert full['full_resnet18_epochs'] == pytest.approx(r18 * 3 * 54_000 / 128)
  assert full['full_screen'] == pytest.approx((3 + 3 + 1 + 1) * 54_000 / 128)
  measured = round4_estimate.measured_rates()  # From the committed records, as the page says.
  assert 0 < measured.teacher < measured.step['ViT', 'plain']
  assert measured.budget_share['hybrid', 'strong'] == 4200 / 6000


def test_the_full_data_recipe_trains_and_predict_reads_its_run(tmp_path):
  """configs/fashion_mnist_95.py shrunk (mocked TFDS): a ResNet-18 run teaches a Swin student
  (the full part's DeiT arm), whose run directory is a checkpoint that `vit_jax.predict` labels
  images with; `arch=resnet18` is the ResNet-18_28px preset."""
  config = config_lib.load_config_module(os.path.join(ROOT, 'configs', 'fashion_mnist_95.py'))
  full = config_lib.load_config_module(os.path.join(ROOT, 'configs', 'fashion_mnist_full.py'))
  assert config.get_config('').to_dict() == dict(
      full.get_config('pretrain').to_dict(), num_epochs=22.)  # Round 3's r3_full_e22.
  r18 = config.get_config('arch=resnet18,aug=strong,size=56')
  assert (r18.model.model_name, r18.model.unit, r18.pp.crop) == ('ResNet-18_28px', 'basic', 56)
  assert (r18.mixup, 'stochastic_depth' in r18.model) == (0.2, False)  # No drop path in it.
  env = dict(os.environ, JAX_PLATFORMS='cpu', VIT_JAX_HUGEPAGES='0',
             PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get('PYTHONPATH')])))
  run_dir, teacher = tmp_path / 'run', tmp_path / 'resnet18'
  # The full part's last stage, shrunk: a ResNet-18 run, then a Swin student distilled from it.
  for arg, workdir, extra in (
      ('arch=resnet18,aug=strong,size=56', teacher, []),
      ('arch=swin28,aug=strong,distill=hard', run_dir,
       [f'--config.distill.teacher_path={teacher}/params.npz'])):
    done = forked.run([os.path.join(ROOT, 'tests', 'mocked_run.py'), 'vit_jax.main',
                       f'--config=configs/fashion_mnist_95.py:{arg},epochs=1,split=val,runlocal',
                       f'--workdir={workdir}'] + extra, cwd=ROOT, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
  with open(teacher / 'metadata.json') as f:
    assert json.load(f)['model']['unit'] == 'basic'
  image = tmp_path / 'shoe.png'
  Image.fromarray(np.zeros((28, 28, 3), np.uint8)).save(image)
  done = forked.run(['-m', 'vit_jax.predict', f'--checkpoint={run_dir}', '--json', str(image)],
                    cwd=ROOT, env=env, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  out = done.stdout
  assert 'shoe.png' in out and any(name in out for name in ('Sneaker', 'Bag', 'Ankle boot',
                                                            'T-shirt/top', 'Trouser',
                                                            'Pullover', 'Dress', 'Coat',
                                                            'Sandal', 'Shirt')), out


def test_a_curves_plot_draws_each_probes_validation_curve_and_skips_runs_without_one(
    tmp_path, monkeypatch):
  table = grid_lib.Table('t', 'T', row='candidate', col='probe', metric='accuracy_val',
                         curves=True)
  runs = [grid_lib.Run(n, 'x', dict(candidate=c, probe='6 steps'))
          for n, c in (('h', 'hybrid'), ('s', 'Swin'), ('v', 'ViT'))]
  records_ = {'h': dict(accuracy_val=.83, val_curve=[[6, .83], [3, .7]]),
              's': dict(accuracy_val=.84, val_curve=[[3, .75], [6, .84]]),
              'v': dict(accuracy_val=None, val_curve=[[3, .6]])}  # Unfinished: not drawn.
  ax = _captured_figure(monkeypatch, plots.plot_table, table, runs, records_,
                        str(tmp_path / 'p.png')).axes[0]
  drawn = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
           for line in ax.get_lines()}
  assert drawn == {'hybrid': ([3, 6], [70., 83.]), 'Swin': ([3, 6], [75., 84.])}
  assert ax.get_xlabel() == 'training step'
  assert ax.get_legend().get_window_extent().x0 >= ax.get_window_extent().x1


def test_compute_plots_label_an_axis_under_half_a_decade_at_every_multiple(tmp_path,
                                                                           monkeypatch):
  """Round 4's three probes (7e13 to 1.8e14 training FLOPs) showed one label, '10^14'."""
  labels, minor = _compute_axis_labels(tmp_path, monkeypatch, 7.2e13, 1.75e14)
  assert labels == [r'$7\times10^{13}$', r'$8\times10^{13}$', r'$9\times10^{13}$',
                    '$10^{14}$', r'$1.5\times10^{14}$'], labels
  assert not minor
