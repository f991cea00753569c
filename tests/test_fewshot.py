"""Few-shot linear evaluation: the closed form, the draws, the features, training and the tool."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax import config_lib
from vit_jax import input_pipeline
from vit_jax import models
from vit_jax.training import fewshot
from vit_jax.training import parallel


def clusters(rng, num_classes, per_class, dim, spread):
  """Features around one random centre per class, labels in class blocks."""
  centres = rng.normal(0, 1, (num_classes, dim))
  labels = np.repeat(np.arange(num_classes), per_class)
  return centres[labels] + spread * rng.normal(0, 1, (len(labels), dim)), labels


@pytest.mark.parametrize('n,dim', [(40, 6), (12, 30)])  # Primal (N > D) and dual (N < D).
def test_closed_form_equals_a_direct_solve(np_rng, n, dim):
  x = np_rng.normal(0, 1, (n, dim)) * np_rng.uniform(0.1, 5, dim) + np_rng.normal(0, 3, dim)
  labels = np_rng.integers(0, 4, n)
  solve = fewshot.least_squares_solver(x, labels, 4)
  for l2 in (0.25, 16., 1024.):
    weights, mean, std = solve(l2)
    np.testing.assert_allclose(mean[0], x.mean(0))
    np.testing.assert_allclose(std[0], x.std(0) + fewshot.STD_EPSILON)
    a = np.concatenate([(x - x.mean(0)) / (x.std(0) + 1e-5), np.full((n, 1), 100.)], axis=1)
    y = np.where(labels[:, None] == np.arange(4)[None], 1., -1.)
    direct = np.linalg.solve(a.T @ a + l2 * np.eye(dim + 1), a.T @ y)
    np.testing.assert_allclose(weights, direct, rtol=1e-6, atol=1e-9)


def test_shot_draws_are_fixed_per_seed_nested_and_apart_from_the_held_out(np_rng):
  labels = np_rng.integers(0, 5, 400)
  fit, held = fewshot.draw_shots(labels, 5, 3, seed=1, holdout=4)
  again, held_again = fewshot.draw_shots(labels, 5, 3, seed=1, holdout=4)
  np.testing.assert_array_equal(fit, again)
  np.testing.assert_array_equal(held, held_again)
  assert np.bincount(labels[fit], minlength=5).tolist() == [3] * 5
  assert np.bincount(labels[held], minlength=5).tolist() == [4] * 5
  assert not set(fit) & set(held)
  one, _ = fewshot.draw_shots(labels, 5, 1, seed=1, holdout=4)
  assert set(one) <= set(fit)  # The 1 shot of a seed is one of its 3 shots.
  other, _ = fewshot.draw_shots(labels, 5, 3, seed=2, holdout=4)
  assert set(other) != set(fit)


def test_too_few_images_for_the_shots_is_one_line():
  with pytest.raises(ValueError, match='class 1 has 2 images .* fewer than 3 shots'):
    fewshot.draw_shots(np.array([0, 0, 0, 1, 1]), 2, 3, seed=0, holdout=0)


def test_separable_classes_score_near_100_and_random_labels_near_chance(np_rng):
  x, labels = clusters(np_rng, 10, 60, 32, spread=0.05)
  train = fewshot.Features(x[::2], labels[::2])
  test = fewshot.Features(x[1::2], labels[1::2])
  results = fewshot.evaluate_features(train, test, 10, (1, 5), 3, (1., 1024.), holdout=5)
  assert [r.shots for r in results] == [1, 5]
  assert all(r.mean > 0.99 for r in results)
  shuffled = fewshot.Features(train.x, np_rng.permutation(train.labels))
  chance = fewshot.evaluate_features(shuffled, fewshot.Features(test.x, np_rng.permutation(
      test.labels)), 10, (10,), 3, (1., 1024.), holdout=5)[0]
  assert abs(chance.mean - 0.1) < 0.06


def test_the_regulariser_is_chosen_without_the_test_split(np_rng):
  x, labels = clusters(np_rng, 4, 50, 16, spread=1.5)
  train = fewshot.Features(x[::2], labels[::2])
  test = fewshot.Features(x[1::2], labels[1::2])
  grid = tuple(2. ** i for i in range(-4, 15, 2))
  first = fewshot.evaluate_features(train, test, 4, (5,), 3, grid, holdout=10)[0]
  flipped = fewshot.Features(test.x, (test.labels + 1) % 4)  # Any other test set.
  second = fewshot.evaluate_features(train, flipped, 4, (5,), 3, grid, holdout=10)[0]
  assert first.l2_regs == second.l2_regs
  assert second.mean < first.mean
  fixed = fewshot.evaluate_features(train, test, 4, (5,), 3, (7.,), holdout=0)[0]
  assert fixed.l2_regs == (7.,) * 3


def test_rows_are_put_back_in_the_split_order_for_several_processes():
  # 2 processes, shares [0..5] and [6..11], local batch 2: global batches interleave them.
  local = [[0, 1], [2, 3], [4, 5]], [[6, 7], [8, 9], [10, 11]]
  batches = [np.array(local[0][b] + local[1][b]) for b in range(3)]
  np.testing.assert_array_equal(fewshot.in_split_order(batches, 2), np.arange(12))
  np.testing.assert_array_equal(fewshot.in_split_order(batches, 1), np.concatenate(batches))
