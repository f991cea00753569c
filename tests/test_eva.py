"""The EVA family (families/eva): presets as timm defines them, the rotary geometry, and a run.

The per-group logit and export checks against timm are tests/test_timm_architectures.py's
(`test_hub_folder_as_published`); the family's passage through every tool is
tests/test_conformance.py's; here what those do not pin.
"""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax import config_lib
from vit_jax import models
from vit_jax import position_embeddings
from vit_jax import presets
from vit_jax.families.eva import model as eva_model
from vit_jax.families.eva import timm as eva_timm
from vit_jax.weights.timm import architectures as timm_architectures

TABLE = timm_architectures.ARCHITECTURES
TIMM_PRESETS = [n for n, c in presets.MODEL_CONFIGS.items() if c.family == 'eva' and n in TABLE]
# What an entry decides, compared with the preset's field of the same meaning.
DECIDED = ('hidden_size', 'classifier', 'posemb', 'layer_norm_eps', 'num_registers', 'norm_pre',
           'fc_norm', 'patch_bias', 'rope', 'rope_temperature', 'rope_offset', 'rope_reference',
           'rope_xy', 'rope_half', 'qkv_bias', 'qk_norm', 'attention_norm', 'mlp', 'mlp_norm')


def _state_like(entry):
  """The parameter names and shapes `eva_fields` reads sizes from (one block, timm's layout)."""
  d, mlp = entry['embed_dim'], entry['mlp_dim']
  sd = {'patch_embed.proj.weight': np.zeros((d, 3, entry['patch_size'], entry['patch_size'])),
        'blocks.0.norm1.weight': np.zeros(d)}
  sd['blocks.0.mlp.fc1_g.weight' if entry['mlp'] == 'swiglu' else 'blocks.0.mlp.fc1.weight'] = (
      np.zeros((2 * mlp if entry['mlp'] == 'swiglu_packed' else mlp, d)))
  for name, present in (('pos_embed', entry['pos_embed'] == 'learn'),
                        ('blocks.0.gamma_1', entry['init_values'] is not None),
                        ('norm_pre.weight', entry['pre_norm']),
                        ('fc_norm.weight', entry['fc_norm']),
                        ('patch_embed.proj.bias', entry['patch_bias']),
                        ('norm.weight', entry['final_norm'])):
    if present:
      sd[name] = np.zeros(1)
  if entry['reg_tokens']:
    sd['reg_token'] = np.zeros((1, entry['reg_tokens'], d))
  return sd


@pytest.mark.parametrize('name', TIMM_PRESETS)
def test_preset_is_timms_definition(name):
  """A preset named after a timm architecture has every field timm's definition gives it."""
  entry = TABLE[name]
  want = eva_timm.eva_fields(entry, _state_like(entry), name)
  got = config_lib.with_model(config_lib.get_config(), name).model
  for key in DECIDED:
    expected = want[key]
    actual = got[key]
    assert (tuple(actual) if isinstance(actual, (list, tuple)) else actual) == expected, key
  t = got.transformer
  assert (t.num_layers, t.num_heads, t.mlp_dim) == (
      entry['depth'], entry['num_heads'], want['transformer']['mlp_dim'])
  assert bool(got.layer_scale) == (entry['init_values'] is not None)


def test_dinov3_coordinates_are_cell_centres_in_minus_one_one():
  """timm's RotaryEmbeddingDinoV3: (i + 0.5) / side mapped to [-1, 1], per axis."""
  coords = position_embeddings.rope_coordinates((2, 4), centered=True)
  np.testing.assert_allclose(coords[:4, 0], [-0.5] * 4)  # Row 0 of 2.
  np.testing.assert_allclose(coords[:4, 1], [-0.75, -0.25, 0.25, 0.75])


def test_eva_reference_grid_keeps_the_pretraining_range():
  """EVA's ref_feat_shape: a 32x32 grid's coordinates span 0..16 as the 16x16 one's do; PE's
  offset of 1 comes before the rescale; xy puts the column first."""
  coarse = position_embeddings.rope_coordinates((16, 16), reference=(16, 16))
  fine = position_embeddings.rope_coordinates((32, 32), reference=(16, 16))
  assert fine.max() == pytest.approx(31 * 0.5) and coarse.max() == 15
  pe = position_embeddings.rope_coordinates((2, 3), offset=1., xy=True)
  np.testing.assert_allclose(pe[1], [2., 1.])  # Row 0, column 1: (x, y) = (1 + 1, 0 + 1).


@pytest.mark.parametrize('half', [False, True])
@pytest.mark.parametrize('centered', [False, True])
def test_rotated_scores_depend_on_the_offset_only(half, centered):
  """For both channel layouts and both coordinate kinds, q·k after rotation is a function of
  the coordinate difference: shifting both patches by the same step leaves it unchanged."""
  coords = position_embeddings.rope_coordinates((4, 4), centered=centered)
  angles = position_embeddings.coordinate_rope_angles(coords, 8, 100., centered=centered)
  rng = np.random.default_rng(0)
  q, k = (jnp.asarray(np.broadcast_to(rng.normal(size=(1, 1, 1, 8)), (1, 16, 1, 8)))
          for _ in range(2))
  rq = position_embeddings.rotate(q, jnp.asarray(angles)[None], half)
  rk = position_embeddings.rotate(k, jnp.asarray(angles)[None], half)
  scores = np.asarray(jnp.einsum('bqhd,bkhd->qk', rq, rk))
  # Patch (0, 0) with (1, 2), and (2, 1) with (3, 3): the same offset (1, 2).
  assert scores[0, 6] == pytest.approx(scores[9, 15], abs=1e-5)
  assert scores[0, 6] != pytest.approx(scores[0, 7], abs=1e-3)


def test_key_without_bias_has_no_bias_parameter():
  """'qv' (EVA's attention): the key projection has no bias to drift in training, since with
  rotary embeddings a key bias is not softmax-invariant."""
  config = config_lib.with_model(config_lib.get_config(), 'EVA-testing').model
  model = models.get_model(config, num_classes=3)
  params = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)),
                                             train=False))['params']
  attention = params['Transformer']['encoderblock_0']['MultiHeadDotProductAttention_0']
  assert 'bias' in attention['query'] and 'bias' not in attention['key']
  assert set(params['Transformer']['encoderblock_0']['SwiGLU_0']) == {'gate', 'up', 'norm',
                                                                      'down'}


def test_the_model_runs_at_any_grid():
  """Rotary angles are recomputed per call: a table-free EVA (DINOv3's) runs at 32 and 48 px."""
  config = config_lib.with_model(config_lib.get_config(), 'vit_small_patch16_dinov3').model
  presets.FAMILIES['eva'].shrink(config)
  model = models.get_model(config, num_classes=2)
  params = model.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)), train=False)['params']
  for side in (32, 48):
    out = model.apply({'params': params}, jnp.ones((2, side, side, 3)), train=False)
    assert out.shape == (2, 2) and np.isfinite(np.asarray(out)).all()


def test_unsupported_parts_are_named():
  """The refused architectures' needs, as the one line says them."""
  assert eva_timm.unsupported_parts(TABLE['eva02_enormous_patch14_clip_224']) == [
      'post-norm blocks (EVA-02-E)']
  assert 'grouped-query attention' in eva_timm.unsupported_parts(
      TABLE['vit_large_patch16_sapiens2'])
  loads = [n for n, e in TABLE.items() if e['family'] == 'eva' and not
           eva_timm.unsupported_parts(e)]
  assert len(loads) == 59 and isinstance(eva_model.Eva, type)


def test_hub_folder_fine_tunes_at_another_grid(tmp_path):
  """An EVA-02 hub folder trained at a 2x2 grid, loaded at 3x3: its absolute table is resized
  (prefix row kept), its rotary reference grid stays timm's (16x16), and it runs."""
  torch = pytest.importorskip('torch')
  timm = pytest.importorskip('timm')
  from timm.models import save_for_hf
  from vit_jax.weights import loading
  torch.manual_seed(0)
  net = timm.create_model('eva02_tiny_patch14_224', pretrained=False, depth=1, img_size=28)
  save_for_hf(net.eval(), str(tmp_path), safe_serialization=True)
  loaded = loading.load_model(str(tmp_path), image_size=42)
  table = loaded.params['Transformer']['posembed_input']['pos_embedding']
  assert table.shape == (1, 1 + 9, 192)
  np.testing.assert_allclose(table[0, 0], net.pos_embed[0, 0].detach().numpy(), atol=1e-6)
  assert tuple(loaded.config.rope_reference) == (16, 16)
  model = models.get_model(loaded.config, num_classes=loaded.num_classes)
  out = model.apply({'params': loaded.params}, jnp.ones((1, 42, 42, 3)), train=False)
  assert out.shape == (1, 192) and np.isfinite(np.asarray(out)).all()


def test_dinov3_hub_folder_through_the_tools(tmp_path, capsys):
  """A DINOv3 folder (4 registers, no position table) as timm saves it: features equal timm's
  pooled features and tokens at its published 256 px, analyze maps the 16x16 patch grid with the
  five prefix tokens left out, flops counts it, few-shot reads it."""
  torch = pytest.importorskip('torch')
  timm = pytest.importorskip('timm')
  from PIL import Image
  from timm.models import save_for_hf
  from vit_jax.data import image_ops
  from vit_jax.tools import analyze, cli, features, fewshot, flops
  from vit_jax.weights import loading
  torch.manual_seed(0)
  net = timm.create_model('vit_small_patch16_dinov3', pretrained=False, depth=1, img_size=32)
  with torch.no_grad():
    for p in net.parameters():
      p.add_(0.2 * torch.randn_like(p))
  hub = str(tmp_path / 'hub')
  save_for_hf(net.eval(), hub, safe_serialization=True)
  rng = np.random.default_rng(0)
  for split in ('train', 'test'):
    for name in ('a', 'b'):
      os.makedirs(tmp_path / 'data' / split / name)
      for i in range(3):
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), np.uint8)).save(
            tmp_path / 'data' / split / name / f'{i}.png')
  image = str(tmp_path / 'data' / 'test' / 'a' / '0.png')
  loaded = loading.load_model(hub)
  # What the tools feed it: the folder's size (256) and normalisation (ImageNet's).
  x = image_ops.load_images([image], loaded.image_size, loaded.mean, loaded.std)
  got = features.extract_features(loaded.model, loaded.params, x)
  with torch.no_grad():
    tokens = net.forward_features(torch.from_numpy(x.transpose(0, 3, 1, 2).copy()).float())
    pooled = net.forward_head(tokens, pre_logits=True).numpy()
  scale = 2e-5 * max(1., float(np.abs(tokens.numpy()).max()))  # As the logit tests.
  np.testing.assert_allclose(np.asarray(got.tokens), tokens.numpy(), atol=scale)
  np.testing.assert_allclose(np.asarray(got.pre_logits), pooled, atol=scale)
  assert got.tokens.shape == (1, 1 + 4 + 16 * 16, 384)

  def call(tool, *args):
    rc = cli.call(tool, [tool.__name__.rsplit('.', 1)[-1], *args])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out

  call(analyze, f'--checkpoint={hub}', f'--out={tmp_path / "an"}', image)
  with open(tmp_path / 'an' / 'analysis.json') as f:
    result = json.load(f)
  maps = list(result['attention_rollout'].values())
  assert len(maps) == 1 and np.asarray(maps[0]).shape == (16, 16)
  assert 'at 256x256' in call(flops, f'--checkpoint={hub}')
  out = call(fewshot, f'--checkpoint={hub}', f'--dataset={tmp_path / "data"}', '--json',
             '--shots=1', '--seeds=1', '--holdout=1', '--l2_regs=1', '--batch_size=4')
  assert [r['shots'] for r in json.loads(out)['results']] == [1]


def test_what_the_weights_cannot_tell_is_asked_for_in_one_line(tmp_path):
  """A bare EVA file (no config.json) cannot tell its rotary embedding: one line asks for the
  architecture. A config.json without pretrained_cfg takes the architecture's published mean,
  std and size (listed as assumed) when its weights all agree."""
  from safetensors.numpy import save_file
  from vit_jax.weights import loading
  from vit_jax.weights.npz_format import CheckpointError
  entry = TABLE['vit_small_patch16_dinov3']
  state = {k: np.asarray(v, np.float32) for k, v in _state_like(entry).items()}
  state['blocks.0.attn.qkv.weight'] = np.zeros((3 * 384, 384), np.float32)
  save_file(state, str(tmp_path / 'bare.safetensors'))
  with pytest.raises(CheckpointError) as e:
    loading.load_model(str(tmp_path / 'bare.safetensors'))
  assert '"architecture"' in str(e.value) and '\n' not in str(e.value)
  mean, std, size, assumed = eva_timm._preprocessing(
      {'architecture': 'vit_small_patch16_dinov3'}, entry)
  assert (mean, size) == ((0.485, 0.456, 0.406), 256) and 'no pretrained_cfg' in assumed[0]


def test_qk_norm_from_model_args_gives_timms_logits(tmp_path):
  """No published eva weight but Sapiens2 (refused) has q/k norms; a RoPE ViT built with them
  (config.json's model_args) loads with timm's logits, its norms under the attention."""
  torch = pytest.importorskip('torch')
  timm = pytest.importorskip('timm')
  from timm.models import save_for_hf
  from vit_jax.weights import loading
  torch.manual_seed(0)
  net = timm.create_model('vit_small_patch16_rope_mixed_224', pretrained=False, depth=1,
                          img_size=32, qk_norm=True, num_classes=5)
  with torch.no_grad():
    for p in net.parameters():
      p.add_(0.2 * torch.randn_like(p))
  save_for_hf(net.eval(), str(tmp_path), safe_serialization=True)
  loaded = loading.load_model(str(tmp_path))
  attention = loaded.params['Transformer']['encoderblock_0']['MultiHeadDotProductAttention_0']
  assert loaded.config.qk_norm and {'q_norm', 'k_norm'} <= set(attention)
  x = np.random.default_rng(1).normal(size=(2, 32, 32, 3)).astype(np.float32)
  with torch.no_grad():
    want = net(torch.from_numpy(x.transpose(0, 3, 1, 2).copy())).numpy()
  got = models.get_model(loaded.config, num_classes=5).apply(
      {'params': loaded.params}, jnp.asarray(x), train=False)
  assert np.abs(np.asarray(got) - want).max() < 2e-5 * max(1., np.abs(want).max())
