"""The classifier few-shot evaluation fits: L2-regularised least squares in closed form.

k images per class of a training split, their features, are mapped to {-1, 1}^C targets by
L2-regularised least squares; the test split is classified by the argmax of the linear map.
The paper's few-shot columns and big_vision's `fewshot_lsr` evaluator work this way: features
whitened with the shots' mean and std, a constant feature of 100 as an (almost unregularised)
bias, and one eigendecomposition of the Gram matrix, primal (D x D) or dual (N x N) whichever is
smaller, so every value of the regulariser costs one matrix product.

The regulariser is chosen per draw from a grid (`FewShot.l2_regs`) by the accuracy on
held-out training images of the same draw (`FewShot.holdout` per class, disjoint from the
shots; never the test split); a grid of one value is a fixed regulariser. Shots are drawn with
`numpy.random.default_rng(seed)` per class, nested (the 5 shots of a seed include its 1 shot),
for seeds 0..n-1; the result is the mean ± std over seeds. NumPy only: no device, no data.
"""

import dataclasses
from typing import Callable, List, Sequence, Tuple

import numpy as np

# The bias feature: large, so that its weight is almost not regularised (big_vision's value).
BIAS_CONSTANT = 100.
# Added to the per-feature std: a feature constant over the shots (e.g. k=1) stays finite.
STD_EPSILON = 1e-5


@dataclasses.dataclass(frozen=True)
class Features:
  """Pre-logit features of one split, in the split's order, and their labels.

  Attributes:
    x: (N, D) float32 features.
    labels: (N,) integer class indices.
  """
  x: np.ndarray
  labels: np.ndarray


@dataclasses.dataclass(frozen=True)
class ShotResult:
  """Test accuracy of one number of shots over the seeds.

  Attributes:
    shots: images per class the linear map was fitted on.
    accuracies: test accuracy of each seed (seed i at index i).
    l2_regs: the regulariser each seed chose on its held-out images (or the fixed one).
    held_out_per_class: (fewest, most) held-out images of a class the regulariser was chosen
      on; (0, 0) for a fixed regulariser.
  """
  shots: int
  accuracies: Tuple[float, ...]
  l2_regs: Tuple[float, ...]
  held_out_per_class: Tuple[int, int] = (0, 0)

  @property
  def mean(self) -> float:
    return float(np.mean(self.accuracies))

  @property
  def std(self) -> float:
    return float(np.std(self.accuracies))


def design_matrix(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
  """Whitened features with the constant bias column appended: (N, D + 1) float64."""
  z = (np.asarray(x, np.float64) - mean) / std
  return np.concatenate([z, np.full((len(z), 1), BIAS_CONSTANT)], axis=1)


def plus_minus_one(labels: np.ndarray, num_classes: int) -> np.ndarray:
  """(N,) class indices → (N, C) targets: +1 for the class, -1 elsewhere."""
  return 2. * (np.asarray(labels)[:, None] == np.arange(num_classes)[None]) - 1.


def least_squares_solver(x: np.ndarray, labels: np.ndarray, num_classes: int
                         ) -> Callable[[float], Tuple[np.ndarray, np.ndarray, np.ndarray]]:
  """Fits once, returns `solve(l2) -> (weights, mean, std)` for any regulariser.

  The weights minimise |A w - Y|^2 + l2 |w|^2 with A = `design_matrix(x)` and Y the ±1
  targets: w = (A^T A + l2 I)^-1 A^T Y (primal, N >= D + 1) or A^T (A A^T + l2 I)^-1 Y (dual),
  both through the eigendecomposition Q diag(e) Q^T of the smaller Gram matrix, so that
  w = L diag(1 / (e + l2)) R for precomputed L and R.
  """
  mean = np.mean(np.asarray(x, np.float64), axis=0, keepdims=True)
  std = np.std(np.asarray(x, np.float64), axis=0, keepdims=True) + STD_EPSILON
  a = design_matrix(x, mean, std)
  y = plus_minus_one(labels, num_classes)
  if a.shape[0] >= a.shape[1]:
    eigs, q = np.linalg.eigh(a.T @ a)
    left, right = q, q.T @ (a.T @ y)
  else:
    eigs, q = np.linalg.eigh(a @ a.T)
    left, right = a.T @ q, q.T @ y

  def solve(l2: float):
    return (left / (eigs + l2)[None]) @ right, mean, std

  return solve


def accuracy(solution: Tuple[np.ndarray, np.ndarray, np.ndarray], x: np.ndarray,
             labels: np.ndarray) -> float:
  """Fraction of (x, labels) whose argmax of the linear map is the label."""
  weights, mean, std = solution
  predictions = np.argmax(design_matrix(x, mean, std) @ weights, axis=1)
  return float(np.mean(predictions == np.asarray(labels)))


def draw_shots(labels: np.ndarray, num_classes: int, shots: int, seed: int, holdout: int
               ) -> Tuple[np.ndarray, np.ndarray]:
  """Indices into `labels` of `shots` images per class and of up to `holdout` others per class.

  Each class's indices are permuted by `np.random.default_rng(seed)` (one draw per seed for all
  numbers of shots: the first k of the permutation are the k shots, so draws are nested); the
  held-out images follow the shots in the same permutation, so they are never shots.

  Raises:
    ValueError: a class has fewer than `shots` images in the training split.
  """
  rng = np.random.default_rng(seed)
  labels = np.asarray(labels)
  picked, held = [], []
  for c in range(num_classes):
    order = rng.permutation(np.flatnonzero(labels == c))
    if len(order) < shots:
      raise ValueError(f'class {c} has {len(order)} images in the few-shot training split, fewer '
                       f'than {shots} shots; use fewer shots or a larger training split.')
    picked.append(order[:shots])
    held.append(order[shots:shots + holdout])
  return np.concatenate(picked), np.concatenate(held)


def choose_l2(solve: Callable, l2_regs: Sequence[float], x_held: np.ndarray,
              labels_held: np.ndarray) -> float:
  """The regulariser of `l2_regs` with the best held-out accuracy (the smallest index on ties);
  a single value is returned as is (a fixed regulariser)."""
  if len(l2_regs) == 1:
    return float(l2_regs[0])
  if not len(labels_held):
    raise ValueError('no held-out training images to choose the L2 regulariser on (the split '
                     'has no images beyond the shots); give one fixed regulariser or a larger '
                     'training split.')
  scores = [accuracy(solve(l2), x_held, labels_held) for l2 in l2_regs]
  return float(l2_regs[int(np.argmax(scores))])


def evaluate_features(train: Features, test: Features, num_classes: int, shots: Sequence[int],
                      seeds: int, l2_regs: Sequence[float], holdout: int) -> List[ShotResult]:
  """Few-shot test accuracy for each number of `shots`, seeds 0..`seeds`-1."""
  if not l2_regs or min(l2_regs) <= 0:
    raise ValueError(f'fewshot l2_regs={tuple(l2_regs)} must be positive numbers.')
  results = []
  for k in shots:
    accs, chosen = [], []
    for seed in range(seeds):
      fit, held = draw_shots(train.labels, num_classes, k, seed, holdout)
      solve = least_squares_solver(train.x[fit], train.labels[fit], num_classes)
      l2 = choose_l2(solve, l2_regs, train.x[held], train.labels[held])
      accs.append(accuracy(solve(l2), test.x, test.labels))
      chosen.append(l2)
    per_class = np.bincount(train.labels[held], minlength=num_classes)
    results.append(ShotResult(
        shots=int(k), accuracies=tuple(accs), l2_regs=tuple(chosen),
        held_out_per_class=(int(per_class.min()), int(per_class.max()))
        if len(l2_regs) > 1 else (0, 0)))
  return results
