"""research/self_supervised/report.py: measured cells from results files, the rest "not run"."""

import json

from research.self_supervised import report


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
