"""Tests for vit_jax.analyze: the numbers behind each figure, and the CLI end to end."""

import json

import numpy as np
import pytest
from PIL import Image

from test_features import write_checkpoint, write_images
from vit_jax.tools import analyze
from vit_jax.tools import cli


def _random_attention(rng, b, h, n):
  logits = rng.standard_normal((b, h, n, n))
  weights = np.exp(logits)
  return weights / weights.sum(-1, keepdims=True)


def test_attention_rollout_math():
  rng = np.random.default_rng(0)
  a1, a2 = _random_attention(rng, 2, 3, 5), _random_attention(rng, 2, 3, 5)
  # Rows of the head-mean sum to 1, so adding I makes them sum to 2.
  step = lambda a: (a.mean(1) + np.eye(5)) / 2  # noqa: E731
  np.testing.assert_allclose(analyze.attention_rollout([a1]), step(a1))
  rollout = analyze.attention_rollout([a1, a2])
  np.testing.assert_allclose(rollout, step(a2) @ step(a1))
  np.testing.assert_allclose(rollout.sum(-1), 1.)
  # Attention that only looks at itself leaves every token its own.
  np.testing.assert_allclose(analyze.attention_rollout([np.broadcast_to(np.eye(5), (1, 2, 5, 5))]),
                             np.eye(5)[None])


def test_rollout_maps_use_class_token_row_or_mean():
  rollout = np.random.default_rng(0).uniform(size=(1, 5, 5))
  maps = analyze.rollout_maps(rollout, (2, 2), num_prefix=1)
  np.testing.assert_allclose(maps[0].ravel(), rollout[0, 0, 1:] / rollout[0, 0, 1:].max())
  maps = analyze.rollout_maps(rollout[:, 1:, 1:], (2, 2), num_prefix=0)
  want = rollout[0, 1:, 1:].mean(0)
  np.testing.assert_allclose(maps[0].ravel(), want / want.max())


def test_mean_attention_distance():
  grid, stride, p = (3, 4), 16, 12
  self_only = np.broadcast_to(np.eye(p + 1), (2, 2, p + 1, p + 1))
  np.testing.assert_allclose(analyze.mean_attention_distance([self_only], grid, stride, 1), 0.)
  # Each patch attends to its right neighbour (or left on the last column): always 16 px.
  right = np.zeros((1, 1, p, p))
  for q in range(p):
    r, c = divmod(q, 4)
    right[0, 0, q, r * 4 + (c + 1 if c < 3 else c - 1)] = 1.
  np.testing.assert_allclose(analyze.mean_attention_distance([right], grid, stride, 0), [[16.]])
  uniform = np.full((1, 3, p, p), 1. / p)
  dist = analyze.mean_attention_distance([uniform, uniform], grid, stride, 0)
  assert dist.shape == (2, 3)
  np.testing.assert_allclose(dist, analyze.patch_distances(grid, stride).mean())
  # Attention to the class token is ignored (renormalised over patches).
  with_cls = np.zeros((1, 1, p + 1, p + 1))
  with_cls[..., 0] = 0.5
  with_cls[0, 0, 1:, 1:] += 0.5 * np.eye(p)
  np.testing.assert_allclose(analyze.mean_attention_distance([with_cls], grid, stride, 1), 0.)


def test_posemb_similarity_and_principal_components():
  rng = np.random.default_rng(0)
  posemb = rng.standard_normal((1, 1 + 6, 8))
  sim = analyze.posemb_similarity(posemb, (2, 3), num_prefix=1)
  assert sim.shape == (2, 3, 2, 3)
  flat = sim.reshape(6, 6)
  np.testing.assert_allclose(np.diag(flat), 1.)
  np.testing.assert_allclose(flat, flat.T)
  # Filters spanned by two directions: the first two components span the same plane.
  basis = np.linalg.qr(rng.standard_normal((4 * 4 * 3, 2)))[0]
  kernel = (basis @ (rng.standard_normal((2, 50)) * [[3.], [1.]])).reshape(4, 4, 3, 50)
  comps, ratio = analyze.principal_components(kernel, 28)
  assert comps.shape == (28, 4, 4, 3) and ratio[:2].sum() > 0.999
  in_span = np.linalg.norm(comps[:2].reshape(2, -1) @ basis, axis=1)
  np.testing.assert_allclose(in_span, [1., 1.], atol=1e-6)


def test_cli_writes_figures_and_numbers(tmp_path, capsys):
  ckpt = tmp_path / 'testing.npz'
  write_checkpoint(ckpt, num_classes=10, image_size=64)
  images = write_images(tmp_path / 'images')[:3]
  out = tmp_path / 'out'
  rc = cli.call(analyze, ['analyze', f'--checkpoint={ckpt}', '--model=testing', f'--out={out}',
                          *images])
  text = capsys.readouterr().out
  assert rc == 0 and 'layer  1' in text
  result = json.loads((out / 'analysis.json').read_text())
  assert result['image_size'] == 64 and result['token_grid'] == [4, 4]
  assert result['images'] == images
  assert np.array(result['mean_attention_distance_px']).shape == (1, 2)
  assert np.array(result['posemb_similarity']).shape == (4, 4, 4, 4)
  assert len(result['embedding_filters']['explained_variance_ratio']) == 10  # 10 filters.
  assert np.array(result['attention_rollout'][images[0]]).shape == (4, 4)
  for name in result['files']:
    assert (out / name).exists()
    if name.endswith('.png'):
      assert Image.open(out / name).size[0] > 100


def test_cli_without_images_uses_samples(tmp_path, capsys):
  ckpt = tmp_path / 'testing.npz'
  write_checkpoint(ckpt, num_classes=3)
  rc = cli.call(analyze, ['analyze', f'--checkpoint={ckpt}', '--model=testing',
                          f'--out={tmp_path}/out'])
  assert rc == 0
  result = json.loads((tmp_path / 'out' / 'analysis.json').read_text())
  assert len(result['images']) >= 2 and result['images_note'] in capsys.readouterr().out


def test_hybrid_uses_root_filters():
  vit = {'embedding': {'kernel': np.zeros((16, 16, 3, 10))}}
  hybrid = {'conv_root': {'kernel': np.zeros((7, 7, 3, 64))},
            'embedding': {'kernel': np.zeros((1, 1, 1024, 10))}}
  assert analyze.embedding_filters(vit)[0] == 'embedding'
  source, kernel = analyze.embedding_filters(hybrid)
  assert source == 'conv_root' and kernel.shape == (7, 7, 3, 64)


@pytest.mark.parametrize('args, message', [
    (['--model=testing'], '--checkpoint=PATH_OR_NAME and --out=DIR'),
    (['--model=testing', '--out=OUT', 'missing.png'], 'Could not find image'),
    (['--model=ViT-Ti_16', '--out=OUT'], 'hidden size 10 in the file, 192 in ViT-Ti_16'),
])
def test_cli_errors(args, message, tmp_path, capsys):
  ckpt = tmp_path / 'testing.npz'
  write_checkpoint(ckpt)
  args = [a.replace('OUT', str(tmp_path / 'out')) for a in args]
  if '--model=testing' not in args or '--out' in ' '.join(args):
    args.append(f'--checkpoint={ckpt}')
  rc = cli.call(analyze, ['analyze', *args])
  err = capsys.readouterr().err
  assert rc == 1 and message in err and len(err.strip().splitlines()) == 1
