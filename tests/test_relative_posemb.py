"""posemb='relative': the paper's Appendix D.4 relative position embeddings (issue 43.1)."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from npz_fixtures import images, perturb
from test_train import assert_trees_close, final_params, killed_and_straight, make_config
from vit_jax import checkpoint
from vit_jax import config_lib
from vit_jax import models
from vit_jax import ops
from vit_jax import position_embeddings
from vit_jax import train
from vit_jax.weights import loading
from vit_jax.weights import metadata as metadata_lib
from vit_jax.weights import npz_format
from vit_jax.tools import flops
from vit_jax.training import from_checkpoint
from vit_jax.training import settings


def _config(**fields):
  config = config_lib.small_vit('rel', patch=8, hidden=16, layers=2, mlp=24, heads=2)
  config.update({'posemb': 'relative', **fields})
  return config


def _model(num_classes=3, **fields):
  return models.get_model(_config(**fields), num_classes=num_classes)


def _init(model, size):
  return model.init(jax.random.key(0), images(1, size, size), train=False)['params']


@pytest.mark.parametrize('classifier', ['token', 'gap'])
def test_shapes_one_table_per_block_no_absolute_table(classifier):
  params = _init(_model(classifier=classifier), 32)  # 4x4 grid → 7x7 offsets.
  assert 'posembed_input' not in params['Transformer']
  for i in range(2):
    table = params['Transformer'][f'encoderblock_{i}']['relative_posemb']
    want = {'rel_embedding': (7, 7, 2, 8)}
    if classifier == 'token':
      want['rel_embedding_prefix'] = (3, 2, 8)
    assert {k: v.shape for k, v in table.items()} == want


def test_offset_index_covers_every_pair_by_its_offset():
  index = position_embeddings.relative_offset_index((3, 4), num_prefix=1)
  assert index.shape == (13, 13)
  offsets = 5 * 7
  assert index[0, 0] == offsets + 2 and (index[0, 1:] == offsets).all()
  assert (index[1:, 0] == offsets + 1).all()
  # Token 1 + 4 * 1 + 2 is (1, 2); token 1 + 0 is (0, 0): offset (1, 2) → row (1+2)*7 + 2+3.
  assert index[1 + 6, 1] == 3 * 7 + 5
  assert index[1 + 6, 1 + 6] == 2 * 7 + 3  # Offset (0, 0) is the table's centre.


def test_one_offsets_key_biases_exactly_the_pairs_with_that_offset():
  gh, gw, heads, dim = 3, 4, 2, 8
  keys = np.zeros(((2 * gh - 1) * (2 * gw - 1) + 3, heads, dim), np.float32)
  dy, dx = 1, -2
  row = (dy + gh - 1) * (2 * gw - 1) + dx + gw - 1
  keys[row] = np.random.default_rng(0).normal(size=(heads, dim))
  index = position_embeddings.relative_offset_index((gh, gw), num_prefix=1)
  query = np.random.default_rng(1).normal(size=(2, 13, heads, dim)).astype(np.float32)
  bias = np.asarray(position_embeddings.relative_logits(query, keys, index))
  assert bias.shape == (2, heads, 13, 13)
  pos = np.stack(np.mgrid[:gh, :gw], -1).reshape(-1, 2)
  want = np.zeros((13, 13), bool)
  want[1:, 1:] = ((pos[:, None] - pos[None]) == (dy, dx)).all(-1)
  assert want.sum() == (gh - dy) * (gw + dx)  # 2 x 2 pairs have offset (1, -2).
  np.testing.assert_array_equal(bias != 0, np.broadcast_to(want, bias.shape))
  q, k = np.argwhere(want)[0]
  np.testing.assert_allclose(bias[:, :, q, k],
                             np.einsum('bhd,hd->bh', query[:, q], keys[row]) / np.sqrt(dim),
                             rtol=1e-5, atol=1e-7)


def test_every_attention_impl_adds_the_same_bias():
  x = images(2, 32, 32)
  params = perturb(_init(_model(), 32))
  logits = {impl: np.asarray(_model(attention_impl=impl).apply({'params': params}, x,
                                                               train=False))
            for impl in ops.ATTENTION_FNS}
  for impl in ('heads_first', 'fused'):
    np.testing.assert_allclose(logits[impl], logits['xla'], rtol=2e-5, atol=2e-6)
  # Zero keys are no bias: the same model as posemb='none' with the same weights.
  zero = jax.tree_util.tree_map_with_path(
      lambda path, v: v * 0 if 'relative_posemb' in jax.tree_util.keystr(path) else v, params)
  none = models.get_model(_config(posemb='none'), num_classes=3)
  plain = {k: v for k, v in zero.items()}
  plain['Transformer'] = {k: {n: t for n, t in v.items() if n != 'relative_posemb'}
                          if k.startswith('encoderblock') else v
                          for k, v in zero['Transformer'].items()}
  got = _model().apply({'params': zero}, x, train=False)
  np.testing.assert_allclose(got, none.apply({'params': plain}, x, train=False), atol=1e-6)
  assert np.abs(logits['xla'] - np.asarray(got)).max() > 1e-3  # The bias moves the logits.


def _exported(tmp_path, size=32):
  model = _model()
  params = perturb(_init(model, size))
  run = tmp_path / 'run'
  description = dict(model_config=_config(), image_size=size, class_names=['a', 'b', 'c'],
                     dataset='folder', step=2)
  checkpoint.save(params, str(run / 'params.npz'),
                  metadata=metadata_lib.describe_run(**description))
  metadata_lib.write_metadata(str(run), **description)
  return run, model, params


def test_npz_round_trip_and_a_bare_file_reads_as_relative(tmp_path):
  run, model, params = _exported(tmp_path)
  loaded = loading.load_model(str(run))
  assert loaded.config['posemb'] == 'relative' and loaded.image_size == 32
  x = images(2, 32, 32, seed=3)
  np.testing.assert_array_equal(loaded.model.apply({'params': loaded.params}, x, train=False),
                                model.apply({'params': params}, x, train=False))
  bare = checkpoint.save(params, str(tmp_path / 'bare.npz'))
  with np.load(bare) as npz:
    assert 'Transformer/encoderblock_1/relative_posemb/rel_embedding' in npz.files
  read = loading.load_model(bare)
  assert read.config['posemb'] == 'relative' and read.image_size == 32  # 7x7 offsets → 4x4.


def test_another_grid_interpolates_the_tables_corners_aligned(tmp_path):
  run, _, params = _exported(tmp_path)
  loaded = loading.load_model(str(run), image_size=48)  # 4x4 → 6x6 grid: 7x7 → 11x11 offsets.
  for i in range(2):
    old = params['Transformer'][f'encoderblock_{i}']['relative_posemb']
    new = loaded.params['Transformer'][f'encoderblock_{i}']['relative_posemb']
    assert new['rel_embedding'].shape == (11, 11, 2, 8)
    for corner in ((0, 0), (0, -1), (-1, 0), (-1, -1), (5, 5)):  # (5, 5) ← offset (0, 0).
      src = (3, 3) if corner == (5, 5) else corner
      np.testing.assert_allclose(new['rel_embedding'][corner], old['rel_embedding'][src],
                                 atol=1e-6)
    np.testing.assert_array_equal(new['rel_embedding_prefix'], old['rel_embedding_prefix'])
  logits = loaded.model.apply({'params': loaded.params}, images(1, 48, 48), train=False)
  assert np.isfinite(logits).all()


def test_killed_relative_run_resumes_to_identical_params(tmp_path, mock_cifar10):
  config = make_config(total_steps=4, checkpoint_every=2, eval_every=0)
  config.model.posemb = 'relative'
  workdir, straight = killed_and_straight(config, tmp_path, 4)
  resumed = final_params(workdir)
  assert any('relative_posemb' in key for key in npz_format.flatten(resumed))
  assert_trees_close(resumed, final_params(straight))


def test_flops_count_the_relative_logits_as_xla_does():
  config = _config(classifier='token')
  got = flops.count_flops(config, 32, num_classes=3)
  n, d, offsets = 17, 16, 7 * 7 + 3
  assert got['relative_position'] == 2 * 2 * n * offsets * d
  plain = flops.count_flops(_config(posemb='learn'), 32, num_classes=3)
  assert got['total'] - plain['total'] == got['relative_position']
  assert 'relative_position' not in plain
  xla = flops.xla_flops(_config(), 32, num_classes=3)
  xla_plain = flops.xla_flops(_config(posemb='learn'), 32, num_classes=3)
  assert xla - xla_plain == pytest.approx(got['relative_position'], rel=0.1)


def test_timm_export_refuses_in_one_line():
  from vit_jax.weights.timm import export as timm_export
  with pytest.raises(timm_export.TimmFormatError, match=r"cannot represent .*posemb relative"):
    timm_export.timm_model_args(_config(), 3, 32)


def test_kept_tokens_bias_is_the_full_sequences_at_their_own_offsets():
  """MAE's visible patches: the (prefix + kept) tokens' bias is the full sequence's, gathered."""
  grid, heads, dim = (2, 3), 2, 4
  table = position_embeddings.RelativePositionKeys(grid_shape=grid, num_heads=heads)
  variables = table.init(jax.random.key(0), 7, dim)
  keys, full_index = table.apply(variables, 7, dim)  # The class token + all 6 patches.
  keep = np.array([[0, 2, 5], [1, 3, 4]], np.int32)
  kept_keys, index = table.apply(variables, 4, dim, keep=keep)
  np.testing.assert_array_equal(kept_keys, keys)
  query = np.random.default_rng(0).normal(size=(2, 7, heads, dim)).astype(np.float32)
  full = np.asarray(position_embeddings.relative_logits(query, keys, full_index))
  tokens = np.concatenate([np.zeros((2, 1), np.int32), 1 + keep], axis=1)
  rows = np.arange(2)[:, None]
  kept = np.asarray(position_embeddings.relative_logits(query[rows, tokens], keys, index))
  want = full[rows[:, :, None], :, tokens[:, :, None], tokens[:, None, :]].transpose(0, 3, 1, 2)
  np.testing.assert_allclose(kept, want, rtol=1e-6, atol=1e-8)


def test_mae_visible_patches_are_the_unmasked_model_on_the_same_patches():
  """With relative offsets only, a 2x2 grid's kept row (column) is the unmasked model on the
  1x2 (2x1) image of those patches: the same tokens at the same offsets (its table is the 3x3
  offsets' dy=0 row, dx=0 column). With remat, its backward pass runs on the same tokens."""
  x = images(2, 16, 16, seed=4)  # Patch 8: a 2x2 grid.
  encoder = models.get_model(_config(classifier='token_unpooled'), num_classes=0)
  params = perturb(jax.jit(encoder.init, static_argnames='train')(
      jax.random.key(0), x, train=False)['params'])
  run = jax.jit(lambda p, image, keep=None: encoder.apply({'params': p}, image, train=False,
                                                          keep=keep))  # Seconds less than eager.
  for kept, rows, cols, table in (((0, 1), slice(0, 8), slice(None), np.s_[1:2]),  # Top row.
                                  ((1, 3), slice(None), slice(8, 16), np.s_[:, 1:2])):  # Right.
    keep = jnp.asarray(np.broadcast_to(np.array(kept, np.int32), (2, 2)))
    sub = jax.tree_util.tree_map_with_path(
        lambda path, v, t=table: v[t] if "'rel_embedding'" in jax.tree_util.keystr(path) else v,
        params)
    np.testing.assert_allclose(run(params, x, keep), run(sub, x[:, rows, cols]),
                               rtol=1e-5, atol=1e-6)
  # Rematerialised blocks carry the kept indices into the backward pass too.
  remat = models.get_model(_config(classifier='token_unpooled', remat=True), num_classes=0)
  grads = jax.jit(jax.grad(lambda p: jnp.sum(remat.apply({'params': p}, x, train=False,
                                                         keep=keep) ** 2)))(params)
  table = grads['Transformer']['encoderblock_1']['relative_posemb']['rel_embedding']
  assert np.isfinite(table).all() and np.abs(table).max() > 0


def test_fine_tuning_a_relative_npz_adopts_its_posemb_and_resumes(tmp_path, mock_cifar10,
                                                                    caplog):
  run, _, params = _exported(tmp_path)
  learn = _config(posemb='learn')  # The config's model: the checkpoint's, but another posemb.
  # Declared by the run's description: the config is completed with it.
  config = make_config(pretrained_path=str(run))
  config.model = learn
  completed = from_checkpoint.with_checkpoint_model(settings.read(config))
  assert completed.model_config.posemb == 'relative'
  # Read from a bare file's shapes: the run trains and exports the relative model, its tables
  # the checkpoint's (lr ~0), and a rerun resumes it (the record keeps the adopted posemb).
  bare = checkpoint.save(params, str(tmp_path / 'bare.npz'))
  config = make_config(total_steps=2, eval_every=0, base_lr=1e-9, pretrained_path=bare)
  config.model = learn
  workdir = str(tmp_path / 'fine')
  with caplog.at_level('INFO'):
    train.train_and_evaluate(config, workdir)
  assert "posemb 'relative'" in caplog.text and '<field>' not in caplog.text
  tuned = final_params(workdir)
  for i in range(2):
    np.testing.assert_allclose(
        tuned['Transformer'][f'encoderblock_{i}']['relative_posemb']['rel_embedding'],
        params['Transformer'][f'encoderblock_{i}']['relative_posemb']['rel_embedding'],
        atol=1e-6)
  assert loading.load_model(workdir).config['posemb'] == 'relative'
  config.total_steps = 3
  assert train.train_and_evaluate(config, workdir)['step'] == 3


def test_a_file_described_as_another_classifier_warns_naming_the_setting(tmp_path, caplog):
  run, _, params = _exported(tmp_path)  # Described: classifier token.
  source = loading.open_source(str(run))
  model = models.get_model(_config(classifier='token_unpooled'), num_classes=3)
  with caplog.at_level('WARNING'):
    loading.fit_source(source, _init(model, 32), _config(classifier='token_unpooled'))
  assert ("classifier 'token' in the file, 'token_unpooled' in the config; set "
          "--config.model.classifier='token'") in caplog.text
  assert '<field>' not in caplog.text
