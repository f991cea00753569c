"""research/self_supervised/report.py: measured cells from results files, the rest "not run"."""

import json
import os

from research.self_supervised import report
from research.self_supervised import run_summary
from research.small_data import report as study_report


def test_table_shows_measured_cells_and_marks_the_rest_not_run(tmp_path):
  results = tmp_path / 'results'
  results.mkdir()
  (results / 'ft_mae_p1.json').write_text(json.dumps(
      {'wall_s': 612.4, 'final': {'step': 1000, 'accuracy_test': 0.71234}}))
  (results / 'mae_e4.json').write_text(json.dumps({'final': {'step': 937}}))
  (results / 'fewshot_mae.json').write_text(json.dumps(
      {'fewshot': {'results': [{'shots': 1, 'mean': 0.5}, {'shots': 5, 'mean': 0.625}]}}))
  study = tmp_path / 'study.jsonl'
  study.write_text(json.dumps({'name': 'vit_p1_s0_p4', 'accuracy_test': 0.6535, 'steps': 1000,
                               'wall_s': 333.0}) + '\n')
  rows = report.table(str(results), str(study)).splitlines()
  assert rows[2] == ('| MAE encoder (937 pretraining steps of batch 256) | 71.23% (1000 steps, '
                     '10m12s) | not run | not run | 50.00 / 62.50 |')
  assert rows[3] == '| MPP encoder | not run | not run | not run | not run |'
  assert rows[4].startswith('| scratch (random init) | 65.35% (1000 steps, 5m33s; study round '
                            '2, vit_p1_s0_p4) | not run | not run | not run |')
  # The supervised encoder is the from-scratch run on all labels: no second 100% cell.
  assert rows[5] == ('| supervised encoder (all 54k labels) | not run | not run | the encoder '
                     'itself (scratch, 100%) | not run |')


def _finetuned(results, name, accuracy):
  (results / f'{name}.json').write_text(json.dumps(
      {'wall_s': 1.0, 'final': {'step': 10, 'accuracy_test': accuracy}}))


def test_slices_table_gives_each_start_its_interval_and_its_paired_gain(tmp_path):
  results = tmp_path / 'results'
  results.mkdir()
  study = tmp_path / 'study.jsonl'  # Scratch on slice 0 at 1%: round 2's run.
  study.write_text(json.dumps({'name': 'vit_p1_s0_p4', 'accuracy_test': 0.60}) + '\n')
  for seed, scratch, mae in ((0, None, 0.70), (1, 0.62, 0.71), (2, 0.64, 0.75)):
    _finetuned(results, f'ft_mae_p1_s{seed}' if seed else 'ft_mae_p1', mae)
    if scratch is not None:
      _finetuned(results, f'scratch_p1_s{seed}', scratch)
  _finetuned(results, 'ft_mpp_p1', 0.5)
  rows = report.slices_table(str(results), str(study)).splitlines()
  # MAE 70, 71, 75: mean 72 ± t(0.975, 2) x sqrt(7) / sqrt(3) = 4.303 x 1.528 = 6.57; minus
  # scratch by slice: 10, 9, 11 points: 10 ± 4.303 x 1 / sqrt(3) = 2.48.
  assert rows[2] == ('| MAE encoder | 72.00 [65.43, 78.57] | +10.00 [+7.52, +12.48]: gain '
                     'supported | 0 of 3 slices run | 0 of 3 slices run |')
  assert rows[3].startswith('| MPP encoder | 1 of 3 slices run | 1 of 3 slices run |')
  assert rows[4].startswith('| scratch (random init) | 62.00 [57.03, 66.97] | – |')


def test_recipe_table_times_each_stage_from_the_records(tmp_path):
  results = tmp_path / 'results'
  results.mkdir()
  stages = {'pretrain': {'started': '2026-11-27T05:00:10+00:00', 'final': {'step': 937}},
            'finetune': {'started': '2026-11-27T05:27:40+00:00',
                         'final': {'step': 1406, 'accuracy_test': 0.9012}}}
  (results / 'recipe_mae.json').write_text(json.dumps(
      {'wall_s': 2995.0, 'finished_utc': '2026-11-27T05:49:55Z', 'stages': stages,
       'final': stages['finetune']['final']}))
  rows = report.recipe_table(str(results)).splitlines()
  # Stage 1: 05:00:10 to 05:27:40 = 27m30s; stage 2: 05:27:40 to 05:49:55 = 22m15s.
  assert rows[2] == ('| `configs/fashion_mnist_ssl.py:mae` | 937 steps, 27m30s | 1406 steps, '
                     '22m15s | 49m55s | 90.12% |')
  assert rows[3] == '| `configs/fashion_mnist_ssl.py:mpp` | not run | not run | not run | not run |'


def test_measure_summarises_a_two_stage_run_by_its_stages(tmp_path):
  for stage, logged in (('pretrain', [{'step': 5, 'train_loss': 1.0},
                                       {'step': 9, 'loss_test': 0.5}]),
                        ('finetune', [{'step': 7, 'train_loss': 0.3},
                                      {'step': 7, 'accuracy_test': 0.8}])):
    (tmp_path / stage).mkdir()
    (tmp_path / stage / 'metrics.jsonl').write_text(
        ''.join(json.dumps(line) + '\n' for line in logged))
    (tmp_path / stage / 'run.json').write_text(json.dumps(
        {'history': [{'event': 'started', 'step': 0, 'time': f'{stage} start'}]}))
  summary = run_summary.summary(str(tmp_path))
  assert summary['final'] == {'step': 7, 'train_loss': 0.3, 'accuracy_test': 0.8}
  assert summary['stages']['pretrain'] == {'started': 'pretrain start',
                                           'final': {'step': 9, 'loss_test': 0.5}}
  assert summary['stages']['finetune']['started'] == 'finetune start'


def test_the_page_shows_the_report_of_the_committed_results():
  """docs/self_supervised.md's tables are generated from docs/self_supervised/results alone."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  with open(os.path.join(root, 'docs', 'self_supervised.md')) as f:
    content = f.read()
  begin, end = study_report.doc_markers(report.DOC_MARKER)
  block = content[content.index(begin) + len(begin) + 1:content.index(end)]
  assert block == report.tables(os.path.join(root, 'docs', 'self_supervised', 'results'),
                                os.path.join(root, 'docs', 'study', 'results.jsonl'))
