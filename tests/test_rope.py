"""posemb='rope' and 'rope_mixed': rotary position embeddings for a ViT trained from scratch
(issue 64, point 4; Heo et al. 2024, timm's RoPE ViTs)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from npz_fixtures import images, perturb
from test_train import assert_trees_close, final_params, killed_and_straight, make_config
from vit_jax import checkpoint
from vit_jax import config_lib
from vit_jax import models
from vit_jax import position_embeddings as pe
from vit_jax import train
from vit_jax.training import from_checkpoint
from vit_jax.training import settings
from vit_jax.weights import loading
from vit_jax.weights import metadata as metadata_lib
from vit_jax.weights import npz_format
from vit_jax.weights.timm import export as timm_export

KINDS = ['rope', 'rope_mixed']


def _config(posemb, **fields):
  config = config_lib.small_vit('rope', patch=8, hidden=16, layers=2, mlp=24, heads=2)
  config.update({'posemb': posemb, **fields})
  return config


def _grid_angles(kind, grid, head_dim=8, heads=2):
  if kind == 'rope':
    return pe.axial_rope_angles(grid, head_dim)
  freqs = pe.init_mixed_rope_freqs(jax.random.key(1), (2, heads, head_dim // 2))
  return pe.mixed_rope_angles(freqs, grid)


@pytest.mark.parametrize('kind', KINDS)
def test_a_score_depends_on_the_offset_only_and_the_prefix_and_padding_stay_put(kind):
  """The same query and key content at every position of a 3x4 grid: after rotation, each
  score is a function of (row offset, column offset) only, and different offsets differ; the
  class token before the grid and the padding after it are not rotated."""
  grid, heads, head_dim = (3, 4), 2, 8
  rng = np.random.default_rng(0)
  content_q, content_k = rng.normal(size=(2, 1, 1, heads, head_dim)).astype(np.float32)
  length = 1 + 12 + 3  # Class token, grid, padding.
  q = np.broadcast_to(content_q, (1, length, heads, head_dim))
  k = np.broadcast_to(content_k, (1, length, heads, head_dim))
  angles = pe.sequence_angles(_grid_angles(kind, grid), 1, length)
  rq, rk = np.asarray(pe.rotate(q, angles)), np.asarray(pe.rotate(k, angles))
  np.testing.assert_array_equal(rq[:, 0], q[:, 0])
  np.testing.assert_array_equal(rk[:, 13:], k[:, 13:])
  scores = np.einsum('qhd,khd->hqk', rq[0, 1:13], rk[0, 1:13])
  rows, cols = pe.grid_coordinates(grid)
  by_offset = {}
  for i in range(12):
    for j in range(12):
      by_offset.setdefault((rows[i] - rows[j], cols[i] - cols[j]), []).append(scores[:, i, j])
  for offset, values in by_offset.items():
    np.testing.assert_allclose(values, [values[0]] * len(values), atol=2e-6, err_msg=offset)
  firsts = np.array([v[0] for v in by_offset.values()])
  assert len(by_offset) == 5 * 7 and np.ptp(firsts, axis=0).min() > 0.1
  # A rotation: the norms stay.
  np.testing.assert_allclose(np.linalg.norm(rq, axis=-1), np.linalg.norm(q, axis=-1), rtol=1e-6)


def test_axial_rope_turns_half_the_pairs_with_the_row_and_half_with_the_column():
  angles = pe.axial_rope_angles((2, 3), 8)  # 2 bands per axis: 1 and 100^-1/2.
  assert angles.shape == (6, 1, 4)
  np.testing.assert_allclose(angles[5, 0], [1, .1, 2, .2], rtol=1e-6)  # Row 1, column 2.
  with pytest.raises(ValueError, match=r"posemb='rope' .* multiple of 4, not 6"):
    pe.axial_rope_angles((2, 2), 6)


@pytest.mark.parametrize('kind', KINDS)
def test_mae_kept_patches_rotate_by_their_own_positions(kind):
  angles = _grid_angles(kind, (2, 3))
  full = pe.sequence_angles(angles, 1, 7)
  keep = np.array([[0, 2, 5], [1, 3, 4]], np.int32)
  kept = pe.sequence_angles(angles, 1, 5, keep)  # Padded by one token.
  tokens = np.concatenate([np.zeros((2, 1), np.int32), 1 + keep], axis=1)
  np.testing.assert_array_equal(kept[:, :4], np.broadcast_to(full, (2,) + full.shape[1:])[
      np.arange(2)[:, None], tokens])
  assert not np.asarray(kept[:, 4]).any()


@pytest.mark.parametrize('kind', KINDS)
def test_the_model_has_no_table_runs_at_any_size_and_mixed_learns_its_frequencies(kind):
  model = models.get_model(_config(kind), num_classes=3)
  params = model.init(jax.random.key(0), images(1, 32, 32), train=False)['params']
  assert 'posembed_input' not in params['Transformer']
  block = params['Transformer']['encoderblock_0']
  assert ('rope_freqs' in block) == (kind == 'rope_mixed')
  if kind == 'rope_mixed':
    assert block['rope_freqs'].shape == (2, 2, 4)  # (x/y, heads, head_dim / 2).
    assert not np.allclose(block['rope_freqs'], params['Transformer']['encoderblock_1'][
        'rope_freqs'])  # Each block draws its own directions.
  for side in (32, 48):  # 4x4 and 6x6 grids, the same params.
    assert np.isfinite(model.apply({'params': params}, images(2, side, side), train=False)).all()
  grads = jax.grad(lambda p: jnp.sum(model.apply({'params': p}, images(2, 32, 32),
                                                 train=False) ** 2))(perturb(params))
  if kind == 'rope_mixed':
    assert np.abs(grads['Transformer']['encoderblock_0']['rope_freqs']).max() > 0
  with pytest.raises(ValueError, match='multiple of 4, not 6'):
    bad = config_lib.small_vit('rope6', patch=8, hidden=12, layers=1, mlp=24, heads=2)
    bad.posemb = kind  # Heads of 6 channels: refused when the model is built.
    models.get_model(bad, num_classes=3)


@pytest.mark.parametrize('kind', KINDS)
def test_every_attention_impl_rotates_the_same(kind):
  x = images(2, 32, 32, seed=2)
  outs = []
  for impl in ('xla', 'heads_first'):
    model = models.get_model(_config(kind, attention_impl=impl), num_classes=3)
    params = perturb(model.init(jax.random.key(0), x, train=False)['params'])
    outs.append(model.apply({'params': params}, x, train=False))
  np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('kind', KINDS)
def test_npz_round_trip_reads_the_posemb_back(kind, tmp_path):
  """A run's export reads back as the same model; a bare npz of mixed RoPE says so by its
  `rope_freqs`, a bare one of axial RoPE (no parameters) is read as a table-free kind with the
  assumption said, and a config that names 'rope' keeps it when fine-tuning that file."""
  model = models.get_model(_config(kind), num_classes=3)
  params = perturb(model.init(jax.random.key(0), images(1, 32, 32), train=False)['params'])
  run = tmp_path / 'run'
  description = dict(model_config=_config(kind), image_size=32, class_names=['a', 'b', 'c'],
                     dataset='folder', step=2)
  checkpoint.save(params, str(run / 'params.npz'),
                  metadata=metadata_lib.describe_run(**description))
  metadata_lib.write_metadata(str(run), **description)
  loaded = loading.load_model(str(run))
  assert loaded.config['posemb'] == kind
  x = images(2, 32, 32, seed=3)
  np.testing.assert_array_equal(loaded.model.apply({'params': loaded.params}, x, train=False),
                                model.apply({'params': params}, x, train=False))
  bare = checkpoint.save(params, str(tmp_path / 'bare.npz'))
  read = loading.open_source(bare).description
  if kind == 'rope_mixed':
    assert read.config['posemb'] == 'rope_mixed'
  else:
    assert read.config['posemb'] == 'sincos2d' and any(
        a.startswith('posemb sincos2d (not none or rope') for a in read.assumed)
    config = make_config(pretrained_path=bare)
    config.model = _config('rope')
    completed = from_checkpoint.with_checkpoint_model(settings.read(config))
    assert completed.model_config.posemb == 'rope'


def test_timm_export_refuses_in_one_line():
  with pytest.raises(timm_export.TimmFormatError, match=r'cannot represent .*posemb rope'):
    timm_export.timm_model_args(_config('rope'), 3, 32)


@pytest.mark.parametrize('kind', KINDS)
def test_killed_rope_run_resumes_to_identical_params(kind, tmp_path, mock_cifar10):
  config = make_config(total_steps=4, checkpoint_every=2, eval_every=0)
  config.model.posemb = kind
  with pytest.raises(ValueError, match='multiple of 4, not 5'):  # `testing`: heads of 5.
    train.train_and_evaluate(config, str(tmp_path / 'refused'))
  assert not (tmp_path / 'refused').exists()  # Refused before it made anything.
  config.model.hidden_size = 16
  workdir, straight = killed_and_straight(config, tmp_path, 4)
  resumed = final_params(workdir)
  assert any('rope_freqs' in key for key in npz_format.flatten(resumed)) == (kind == 'rope_mixed')
  assert_trees_close(resumed, final_params(straight))
  assert loading.load_model(workdir).config['posemb'] == kind
