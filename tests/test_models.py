"""Model presets (exact parameter counts), param tree names, output shapes and the extras."""

import math

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from npz_fixtures import images, perturb
from vit_jax import models
from vit_jax import models_vit
from vit_jax import ops
from vit_jax import position_embeddings
from vit_jax import presets

# Official counts for num_classes=1000 at 224px (the official models_test.py table).
OFFICIAL_COUNTS = {
    'testing': 21_390,
    'testing-unpooled': 21_370,
    'ViT-Ti_16': 5_717_416,
    'ViT-S_16': 22_050_664,
    'ViT-B_16': 86_567_656,
    'ViT-L_16': 304_326_632,
    'ViT-H_14': 632_045_800,
    'ViT-B_8': 86_576_872,
    'ViT-S_32': 22_878_952,
    'ViT-B_32': 88_224_232,
    'ViT-L_32': 306_535_400,
    'ViT-S_16-gap-norep': 22_049_896,
    'ViT-B_16-gap-norep': 86_566_120,
    'ViT-S_32-gap-norep': 22_878_184,
    'ViT-B_32-gap-norep': 88_222_696,
    'R+ViT-Ti_16': 6_337_704,
    'R50+ViT-B_16': 98_659_112,
    'R26+ViT-S_32': 36_431_912,
    'R26+ViT-B_32': 101_383_976,
    'R50+ViT-L_32': 328_994_856,
    'Mixer-B_16': 59_880_472,
    'Mixer-B_32': 60_293_428,
    'Mixer-L_16': 208_196_168,
    # Not in the official table. ResNet-50: torchvision's resnet50 num_params (25557032, its
    # docs): the same convs, fc and norm channels (GroupNorm where it has BatchNorm).
    'ResNet-50': 25_557_032,
    # 3x3 root instead of 7x7: 64·3·(49 - 9) = 7,680 fewer (by chance as many as BiT-R50x1,
    # whose pre-activation units have 7,680 fewer norm params: 25,549,352).
    'ResNet-50_32px': 25_549_352,
    'ResNet-11_28px': 1_007_880,  # 500,010 with Fashion-MNIST's 10 classes.
    # torchvision's resnet18 num_params (11,689,512, its docs) with a 3x3 root conv: 7,680 fewer
    # (11,173,962 with 10 classes, as timm's resnet18 with that root conv, counted 2026-12-02).
    'ResNet-18_28px': 11_681_832,
    # Swin: timm's count (sum of numel of timm.create_model(pretrained=False) on the meta device,
    # timm 1.0): swin_{tiny,small,base,large}_patch4_window{7_224,12_384}; the small ones are
    # timm's SwinTransformer with their fields at SWIN_SIZES (1000 classes).
    'Swin-T_4_7': 28_288_354,
    'Swin-S_4_7': 49_606_258,
    'Swin-B_4_7': 87_768_224,
    'Swin-B_4_12': 87_903_584,
    'Swin-L_4_7': 196_532_476,
    'Swin-L_4_12': 196_735_516,
    'Swin-testing': 68_612,
    'Swin-FMNIST_2_7': 696_196,  # 568,486 with Fashion-MNIST's 10 classes.
    # timm 1.0.31's parameter counts of the same architectures (a 1000-class head, 224 px;
    # `sum(p.numel() for p in timm.create_model(name, num_classes=1000).parameters())`).
    'eva02_tiny_patch14_224': 5_695_144,
    'eva02_small_patch14_224': 22_006_120,
    'eva02_base_patch14_224': 86_527_720,
    'vit_small_patch16_dinov3': 21_971_944,
    'vit_base_patch16_dinov3': 86_410_216,
    'EVA-testing': 156_552,  # This package's test preset: `expected_eva_count`'s formula.
}
# The input side a Swin's count is for: its windows clamp (and its bias tables shrink) on maps
# smaller than the window. The published ones: 224 for window 7, 384 for window 12.
SWIN_SIZES = {'Swin-testing': 32, 'Swin-FMNIST_2_7': 28}


def _layer_norm(width):
  return 2 * width  # scale + bias


def _dense(fan_in, fan_out):
  return fan_in * fan_out + fan_out


def _resnet_count(num_layers, width_factor, root_kernel=7, unit='bottleneck'):
  """Root (conv, no bias, + GroupNorm) and bottleneck or basic units; returns (params, out
  channels)."""
  width = int(64 * width_factor)
  count = root_kernel**2 * 3 * width + 2 * width
  cin = width
  for stage, units in enumerate(num_layers):
    f = width * 2**stage
    out = 4 * f if unit == 'bottleneck' else f
    for u in range(units):
      if unit == 'bottleneck':
        count += cin * f + 2 * f  # conv1 1x1 + gn1
        count += 3 * 3 * f * f + 2 * f  # conv2 3x3 + gn2
        count += f * out + 2 * out  # conv3 1x1 + gn3
      else:
        count += 3 * 3 * cin * f + 2 * f + 3 * 3 * f * f + 2 * f  # conv1, gn1, conv2, gn2
      if cin != out or (stage and u == 0):  # Projection where channels or stride change.
        count += cin * out + 2 * out
      cin = out
  return count, cin


def expected_vit_count(config, num_classes, image_size=224):
  """Parameter count of a ViT / hybrid from its architecture description."""
  d = config.hidden_size
  t = config.transformer
  ph, pw = config.patches.size
  count, in_ch, side = 0, 3, image_size
  if config.get('resnet') is not None:
    stages = config.resnet.num_layers
    count, in_ch = _resnet_count(stages, config.resnet.width_factor)
    side //= 4 * 2**max(len(stages) - 1, 0)  # Root /4, then /2 per stage after the first.
  count += ph * pw * in_ch * d + d  # patch embedding conv
  prefix = 1 if config.classifier in ('token', 'token_unpooled') else 0
  count += prefix * d  # cls
  count += (prefix + (side // ph) * (side // pw)) * d  # learned 1-D position embedding
  block = (_layer_norm(d) + 4 * _dense(d, d)  # LN + q, k, v, out
           + _layer_norm(d) + _dense(d, t.mlp_dim) + _dense(t.mlp_dim, d))
  count += t.num_layers * block + _layer_norm(d)  # blocks + encoder_norm
  width = d
  if config.representation_size is not None:
    count += _dense(d, config.representation_size)
    width = config.representation_size
  return count + _dense(width, num_classes)


def expected_mixer_count(config, num_classes, image_size=224):
  d = config.hidden_dim
  ph, pw = config.patches.size
  tokens = (image_size // ph) * (image_size // pw)
  count = ph * pw * 3 * d + d  # stem
  block = (2 * _layer_norm(d) + _dense(tokens, config.tokens_mlp_dim)
           + _dense(config.tokens_mlp_dim, tokens) + _dense(d, config.channels_mlp_dim)
           + _dense(config.channels_mlp_dim, d))
  count += config.num_blocks * block + _layer_norm(d)  # + pre_head_layer_norm
  return count + _dense(d, num_classes)


def expected_resnet_count(config, num_classes, image_size=224):
  del image_size  # Convolutions and global pooling: any input size.
  count, width = _resnet_count(config.stage_sizes, config.width_factor, config.root_kernel,
                               config.get('unit', 'bottleneck'))
  return count + _dense(width, num_classes)


def expected_swin_count(config, num_classes, image_size):
  """Patch embedding + LN; per stage patch merging, blocks (q, k, v, out, bias table, MLP)."""
  p, c = config.patches.size[0], config.embed_dim
  side = image_size // p
  count = p * p * 3 * c + c + _layer_norm(c)
  for stage, (depth, heads) in enumerate(zip(config.depths, config.num_heads)):
    if stage:
      side = math.ceil(side / 2)
      count += _layer_norm(4 * c) + 4 * c * 2 * c  # Merging: no bias.
      c *= 2
    window = min(side, config.window_size)
    mlp = int(c * config.mlp_ratio)
    block = (2 * _layer_norm(c) + 4 * _dense(c, c) + (2 * window - 1)**2 * heads
             + _dense(c, mlp) + _dense(mlp, c))
    count += depth * block
  return count + _layer_norm(c) + _dense(c, num_classes)


def expected_eva_count(config, num_classes, image_size):
  """The ViT's parts with EVA's: q/v-only or no biases, q/k and attention norms, SwiGLU (gate,
  up, down, its norm), mixed RoPE's frequencies (width numbers per block), MAP heads."""
  extras = dict(presets.EVA_EXTRAS, **config.to_dict())
  d, t = config.hidden_size, config.transformer
  p, m, heads = config.patches.size[0], t.mlp_dim, t.num_heads
  prefix = int(config.classifier in presets.CLASS_TOKEN_CLASSIFIERS) + extras['num_registers']
  tokens = (image_size // p)**2 + (0 if extras['no_embed_class'] else prefix)
  count = p * p * 3 * d + d * extras['patch_bias'] + prefix * d
  count += tokens * d * (extras['posemb'] == 'learn') + _layer_norm(d) * extras['norm_pre']
  biases = {'qkv': 3, 'qv': 2, 'none': 0}[extras['qkv_bias']] * d
  block = 2 * _layer_norm(d) + 3 * d * d + biases + _dense(d, d)
  block += 2 * _layer_norm(d // heads) * extras['qk_norm']
  block += _layer_norm(d) * extras['attention_norm']
  block += 2 * d * bool(extras['layer_scale']) + d * (extras['rope'] == 'mixed')
  if extras['mlp'] == 'swiglu':
    block += 2 * _dense(d, m) + _dense(m, d) + _layer_norm(m) * extras['mlp_norm']
  else:
    block += _dense(d, m) + _dense(m, d)
  count += t.num_layers * block
  count += _layer_norm(d) * (extras['fc_norm'] or extras['final_norm'])
  return count + _dense(d, num_classes)


def count_size(name):
  """The image side a preset's count is taken at (Swin: its own; the others: 224)."""
  config = models.MODEL_CONFIGS[name]
  if models.family_of(config) != 'swin':
    return 224
  return SWIN_SIZES.get(name, presets.finetune_resolution(config))


def expected_count(name, num_classes=1000, image_size=None):
  config = models.MODEL_CONFIGS[name]
  fn = {'mixer': expected_mixer_count, 'resnet': expected_resnet_count,
        'swin': expected_swin_count, 'eva': expected_eva_count}.get(models.family_of(config),
                                                                     expected_vit_count)
  return fn(config, num_classes, image_size or count_size(name))


def abstract_params(model, image_size=(224, 224)):
  x = jax.ShapeDtypeStruct((1, *image_size, 3), jnp.float32)
  variables = jax.eval_shape(lambda x: model.init(jax.random.key(0), x, train=False), x)
  return variables['params']


def count(params):
  return sum(math.prod(x.shape) for x in jax.tree.leaves(params))


def test_every_preset_is_tested():
  untested = set(models.MODEL_CONFIGS) - set(OFFICIAL_COUNTS)
  assert not untested, f'add these presets to OFFICIAL_COUNTS: {sorted(untested)}'


@pytest.mark.parametrize('name', sorted(OFFICIAL_COUNTS))
def test_formula_matches_official_count(name):
  assert expected_count(name) == OFFICIAL_COUNTS[name]


@pytest.mark.parametrize('name', sorted(models.MODEL_CONFIGS))
def test_param_count(name):
  side = count_size(name)
  params = abstract_params(models.get_model(name, num_classes=1000), (side, side))
  assert count(params) == expected_count(name)
  assert count(params) == OFFICIAL_COUNTS.get(name)


def test_param_count_other_resolution_and_head():
  # 384px: 24x24 grid; 21843-class head of the imagenet21k files; representation layer.
  model = models.get_model('ViT-B_16', num_classes=21843, representation_size=768)
  config = models.get_config('ViT-B_16')
  config.representation_size = 768
  assert count(abstract_params(model, (384, 384))) == expected_vit_count(config, 21843, 384)


def test_vit_b16_param_names_match_published_layout():
  params = abstract_params(models.get_model('ViT-B_16', num_classes=10))
  got = {k: v.shape for k, v in flax.traverse_util.flatten_dict(params, sep='/').items()}
  d, h, hd, m = 768, 12, 64, 3072
  want = {
      'embedding/kernel': (16, 16, 3, d), 'embedding/bias': (d,), 'cls': (1, 1, d),
      'Transformer/posembed_input/pos_embedding': (1, 197, d),
      'Transformer/encoder_norm/scale': (d,), 'Transformer/encoder_norm/bias': (d,),
      'head/kernel': (d, 10), 'head/bias': (10,),
  }
  for i in range(12):
    block = f'Transformer/encoderblock_{i}'
    for ln in ('LayerNorm_0', 'LayerNorm_1'):
      want[f'{block}/{ln}/scale'] = want[f'{block}/{ln}/bias'] = (d,)
    mha = f'{block}/MultiHeadDotProductAttention_0'
    for proj in ('query', 'key', 'value'):
      want[f'{mha}/{proj}/kernel'] = (d, h, hd)
      want[f'{mha}/{proj}/bias'] = (h, hd)
    want[f'{mha}/out/kernel'] = (h, hd, d)
    want[f'{mha}/out/bias'] = (d,)
    want[f'{block}/MlpBlock_0/Dense_0/kernel'] = (d, m)
    want[f'{block}/MlpBlock_0/Dense_0/bias'] = (m,)
    want[f'{block}/MlpBlock_0/Dense_1/kernel'] = (m, d)
    want[f'{block}/MlpBlock_0/Dense_1/bias'] = (d,)
  assert got == want


def test_hybrid_and_mixer_names():
  flat = flax.traverse_util.flatten_dict(
      abstract_params(models.get_model('R50+ViT-B_16', num_classes=10)), sep='/')
  assert flat['conv_root/kernel'].shape == (7, 7, 3, 64)
  assert flat['gn_root/scale'].shape == (64,)
  assert flat['block1/unit1/conv_proj/kernel'].shape == (1, 1, 64, 256)
  assert flat['block3/unit9/conv3/kernel'].shape == (1, 1, 256, 1024)
  assert 'block1/unit2/conv_proj/kernel' not in flat
  assert flat['embedding/kernel'].shape == (1, 1, 1024, 768)
  assert flat['Transformer/posembed_input/pos_embedding'].shape == (1, 197, 768)
  assert not any('bias' in k and 'conv' in k for k in flat), 'hybrid convs have no bias'
  mixer = flax.traverse_util.flatten_dict(
      abstract_params(models.get_model('Mixer-B_16', num_classes=10)), sep='/')
  assert mixer['stem/kernel'].shape == (16, 16, 3, 768)
  assert mixer['MixerBlock_11/token_mixing/Dense_0/kernel'].shape == (196, 384)
  assert mixer['MixerBlock_0/channel_mixing/Dense_1/kernel'].shape == (3072, 768)
  assert mixer['pre_head_layer_norm/scale'].shape == (768,)


# Small models for the numerical tests (32x32 images, 4x4 grid of 8x8 patches).
TINY = dict(patches={'size': (8, 8)}, hidden_size=16, representation_size=None,
            transformer=dict(mlp_dim=32, num_heads=2, num_layers=2,
                             attention_dropout_rate=0., dropout_rate=0.))


def tiny(**kwargs):
  return models_vit.VisionTransformer(**{'num_classes': 5, **TINY, **kwargs})


def init(model, x, seed=0):
  return model.init(jax.random.key(seed), x, train=False)['params']


@pytest.mark.parametrize('classifier,shape', [
    ('token', (2, 7)), ('gap', (2, 7)), ('unpooled', (2, 16, 7)), ('token_unpooled', (2, 17, 7)),
])
def test_output_shapes(classifier, shape):
  model = tiny(classifier=classifier, num_classes=7)
  x = images(2, 32, 32)
  assert model.apply({'params': init(model, x)}, x, train=False).shape == shape


def test_preset_output_shapes():
  x = jnp.zeros((2, 32, 32, 3))
  out = jax.eval_shape(lambda: models.get_model('testing', num_classes=3).init_with_output(
      jax.random.key(0), x, train=False))[0]
  assert out.shape == (2, 3)
  out = jax.eval_shape(lambda: models.get_model('testing-unpooled', num_classes=3)
                       .init_with_output(jax.random.key(0), x, train=False))[0]
  assert out.shape == (2, 4, 3)
  out = jax.eval_shape(lambda: models.get_model('R50+ViT-B_16', num_classes=3)
                       .init_with_output(jax.random.key(0), jnp.zeros((1, 64, 64, 3)),
                                         train=False))[0]
  assert out.shape == (1, 3)


def test_no_head_and_representation():
  x = images(2, 32, 32)
  model = tiny(num_classes=None, representation_size=12)
  out = model.apply({'params': init(model, x)}, x, train=False)
  assert out.shape == (2, 12)
  assert np.all(np.abs(out) <= 1)  # tanh pre_logits


def test_head_is_zero_initialised():
  model = tiny()
  x = images(2, 32, 32)
  params = init(model, x)
  assert not np.any(params['head']['kernel']) and not np.any(params['head']['bias'])
  np.testing.assert_array_equal(model.apply({'params': params}, x, train=False), 0.)
  mixer = models.get_model('Mixer-B_16', num_classes=4)
  mixer_params = abstract_params(mixer)
  assert mixer_params['head']['kernel'].shape == (768, 4)
  mixer = models.MlpMixer(patches={'size': (8, 8)}, num_classes=4, num_blocks=1, hidden_dim=8,
                          tokens_mlp_dim=4, channels_mlp_dim=8)
  p = init(mixer, x)
  assert not np.any(p['head']['kernel'])


def test_bad_classifier():
  with pytest.raises(ValueError, match='classifier'):
    models.get_model('testing', num_classes=3, classifier='cls')


def test_bad_choices_of_extras():
  with pytest.raises(ValueError, match='posemb'):
    tiny(posemb='learned')
  with pytest.raises(ValueError, match='attention_impl'):
    tiny(attention_impl='flash')


def test_unknown_preset():
  with pytest.raises(ValueError, match='Unknown model'):
    models.get_model('ViT-X_16', num_classes=3)


@pytest.mark.parametrize('name,size', [('testing', (40, 32)), ('R+ViT-Ti_16', (40, 32)),
                                       ('Mixer-B_16', (32, 40))])
def test_image_not_divisible_by_patch(name, size):
  model = models.get_model(name, num_classes=3)
  x = jax.ShapeDtypeStruct((1, *size, 3), jnp.float32)
  with pytest.raises(ValueError, match='not divisible by the patch size'):
    jax.eval_shape(lambda x: model.init(jax.random.key(0), x, train=False), x)


def test_token_grid():
  assert models.token_grid(models.MODEL_CONFIGS['ViT-B_16'], (384, 512)) == (24, 32)
  assert models.token_grid(models.MODEL_CONFIGS['R50+ViT-B_16'], (224, 224)) == (14, 14)
  assert models.token_grid(models.MODEL_CONFIGS['R+ViT-Ti_16'], (224, 224)) == (7, 7)
  assert models.token_grid(models.MODEL_CONFIGS['R26+ViT-S_32'], (384, 384)) == (12, 12)


def _reference_vit(params, x, *, heads, classifier):
  """The official ViT forward pass written out in NumPy (float64) from the param tree."""
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)

  def ln(v, q):
    mu = v.mean(-1, keepdims=True)
    var = ((v - mu)**2).mean(-1, keepdims=True)
    return (v - mu) / np.sqrt(var + 1e-6) * q['scale'] + q['bias']

  def gelu(v):  # tanh approximation
    return 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v**3)))

  kh, kw, c, d = p['embedding']['kernel'].shape
  n, hh, ww, _ = x.shape
  patches = x.reshape(n, hh // kh, kh, ww // kw, kw, c).transpose(0, 1, 3, 2, 4, 5)
  tok = patches.reshape(n, -1, kh * kw * c) @ p['embedding']['kernel'].reshape(-1, d)
  tok = tok + p['embedding']['bias']
  if classifier == 'token':
    tok = np.concatenate([np.broadcast_to(p['cls'], (n, 1, d)), tok], axis=1)
  tr = p['Transformer']
  tok = tok + tr['posembed_input']['pos_embedding']
  i = 0
  while f'encoderblock_{i}' in tr:
    blk = tr[f'encoderblock_{i}']
    a = blk['MultiHeadDotProductAttention_0']
    y = ln(tok, blk['LayerNorm_0'])
    q, k, v = (np.einsum('ntd,dhk->nthk', y, a[m]['kernel']) + a[m]['bias']
               for m in ('query', 'key', 'value'))
    logits = np.einsum('nqhk,nshk->nhqs', q, k) / np.sqrt(q.shape[-1])
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    o = np.einsum('nhqs,nshk->nqhk', w, v)
    tok = tok + np.einsum('nqhk,hkd->nqd', o, a['out']['kernel']) + a['out']['bias']
    mlp = blk['MlpBlock_0']
    y = ln(tok, blk['LayerNorm_1'])
    y = gelu(y @ mlp['Dense_0']['kernel'] + mlp['Dense_0']['bias'])
    tok = tok + y @ mlp['Dense_1']['kernel'] + mlp['Dense_1']['bias']
    i += 1
  tok = ln(tok, tr['encoder_norm'])
  pooled = tok[:, 0] if classifier == 'token' else tok.mean(1)
  return pooled @ p['head']['kernel'] + p['head']['bias']


@pytest.mark.parametrize('classifier', ['token', 'gap'])
def test_default_matches_reference_forward(classifier):
  model = tiny(classifier=classifier)
  assert (model.posemb, model.stochastic_depth, model.dtype, model.remat,
          model.attention_impl) == ('learn', 0., jnp.float32, False, 'xla')
  x = images(3, 32, 32)
  params = perturb(init(model, x), scale=0.2)
  got = model.apply({'params': params}, x, train=False)
  want = _reference_vit(params, x.astype(np.float64), heads=2, classifier=classifier)
  np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


def test_presets_leave_extras_off():
  for name, config in models.MODEL_CONFIGS.items():
    if models.family_of(config) == 'eva':  # Its presets are timm's definitions (test_eva).
      continue
    for field in ('posemb', 'stochastic_depth', 'dtype', 'remat', 'attention_impl'):
      assert field not in config, (name, field)
  # Explicitly passing the off values changes nothing.
  x = images(2, 32, 32)
  model = tiny()
  params = perturb(init(model, x))
  off = tiny(posemb='learn', stochastic_depth=0., dtype=jnp.float32, remat=False,
             attention_impl='xla')
  assert jax.tree.structure(init(off, x)) == jax.tree.structure(params)
  np.testing.assert_array_equal(model.apply({'params': params}, x, train=False),
                                off.apply({'params': params}, x, train=False))


def test_posemb_learn_2d():
  x = images(2, 32, 32)
  for classifier, prefix in (('token', True), ('gap', False)):
    model = tiny(posemb='learn_2d', classifier=classifier)
    pe = init(model, x)['Transformer']['posembed_input']
    want = {'pos_embedding_row': (4, 8), 'pos_embedding_col': (4, 8)}
    if prefix:
      want['pos_embedding_prefix'] = (1, 1, 16)
    assert {k: v.shape for k, v in pe.items()} == want
  # The table is row embedding ⊕ column embedding per cell.
  params = perturb(init(tiny(posemb='learn_2d', classifier='gap'), x))
  pe = params['Transformer']['posembed_input']
  module = position_embeddings.AddPositionEmbs2D(grid_shape=(4, 4))
  out = module.apply({'params': pe}, np.zeros((1, 16, 16), np.float32))
  r, c = 2, 3
  np.testing.assert_allclose(out[0, r * 4 + c], np.concatenate(
      [pe['pos_embedding_row'][r], pe['pos_embedding_col'][c]]), rtol=1e-6)


def _permute_patches(x, patch=8):
  """Moves whole 8x8 patches around the grid (reverses their order)."""
  n, h, w, c = x.shape
  g = x.reshape(n, h // patch, patch, w // patch, patch, c).transpose(0, 1, 3, 2, 4, 5)
  g = g.reshape(n, -1, patch, patch, c)[:, ::-1]
  g = g.reshape(n, h // patch, w // patch, patch, patch, c).transpose(0, 1, 3, 2, 4, 5)
  return g.reshape(n, h, w, c)


@pytest.mark.parametrize('posemb', ['sincos2d', 'none'])
def test_fixed_and_no_posemb(posemb):
  model = tiny(posemb=posemb, classifier='gap')
  x = images(2, 32, 32)
  params = perturb(init(model, x))
  assert 'posembed_input' not in params['Transformer']
  apply = lambda v: model.apply({'params': params}, v, train=False)  # noqa: E731
  diff = np.abs(apply(x) - apply(_permute_patches(x))).max()
  if posemb == 'none':  # gap without positions is invariant to moving patches around.
    assert diff < 1e-5
  else:
    assert diff > 1e-3


def test_sincos_table():
  table = position_embeddings.posemb_sincos_2d((3, 5), 16)
  assert table.shape == (1, 15, 16)
  assert np.abs(table).max() <= 1
  assert len(np.unique(table.round(6), axis=1)[0]) == 15  # every cell distinct
  with pytest.raises(ValueError):
    position_embeddings.posemb_sincos_2d((2, 2), 10)


def test_remat_identical_logits_and_gradients():
  x = images(2, 32, 32)
  plain, remat = tiny(), tiny(remat=True)
  params = perturb(init(plain, x))
  assert jax.tree.structure(init(remat, x)) == jax.tree.structure(params)

  def loss(model):
    return lambda p: jnp.sum(model.apply({'params': p}, x, train=False)**2)

  # Bit-identity is a property of the code XLA emits: compiled as a user's run is, with XLA:CPU's
  # default (fusion) emitters, which the suite turns off to compile sooner (tests/forked.py).
  as_users_run = dict(compiler_options={'xla_cpu_use_fusion_emitters': True})
  for fn in (lambda m: lambda p: m.apply({'params': p}, x, train=False),
             lambda m: jax.grad(loss(m))):
    a, b = (jax.jit(fn(m)).lower(params).compile(**as_users_run)(params) for m in (plain, remat))
    jax.tree.map(np.testing.assert_array_equal, a, b)  # Same ops, recomputed: bit-identical.
  # Remat in train mode (dropout rng threading) still runs and matches with no dropout.
  g = jax.jit(jax.grad(lambda p: jnp.sum(remat.apply(
      {'params': p}, x, train=True, rngs={'dropout': jax.random.key(1)})**2)))(params)
  assert jax.tree.structure(g) == jax.tree.structure(params)


def test_rematerialized_matches_gradient_with_randomness():
  """The recomputed backward of a random function sees the same randomness as its forward."""
  def fn(params, x, rng):
    keep = jax.random.bernoulli(rng, 0.7, x.shape)
    return jnp.tanh(jnp.where(keep, x @ params['w'], 0.) + params['b'])

  params = {'w': jax.random.normal(jax.random.key(0), (6, 6)), 'b': jnp.arange(6.)}
  x, rng = jax.random.normal(jax.random.key(1), (4, 6)), jax.random.key(2)
  loss = lambda f: lambda p, x: jnp.sum(f(p, x, rng)**2)
  expected = jax.jit(jax.grad(loss(fn), argnums=(0, 1)))(params, x)
  got = jax.jit(jax.grad(loss(ops.rematerialized(fn)), argnums=(0, 1)))(params, x)
  jax.tree.map(lambda u, v: np.testing.assert_allclose(u, v, rtol=1e-6, atol=1e-7), got, expected)


def test_remat_cuts_compiled_training_memory():
  """XLA's own buffer plan for the gradient shrinks with remat (activations are recomputed).

  Compared per example (the plan at batch 16 minus the plan at batch 8), so fixed buffers such
  as cuBLAS's 32 MiB workspace on GPU do not hide the activations of the tiny test model.
  """
  config = dict(transformer={**TINY['transformer'], 'num_layers': 6, 'mlp_dim': 128})

  def temp_bytes(remat, batch):
    x = images(batch, 32, 32)
    model = tiny(remat=remat, **config)
    params = init(model, x)
    grad = jax.jit(jax.grad(lambda p: jnp.sum(model.apply({'params': p}, x, train=True)**2)))
    return grad.lower(params).compile().memory_analysis().temp_size_in_bytes

  per_example = {remat: temp_bytes(remat, 16) - temp_bytes(remat, 8) for remat in (False, True)}
  assert 0 < per_example[True] <= 0.7 * per_example[False], per_example


def test_fused_attention_matches_plain():
  x = images(2, 32, 32)
  plain, fused = tiny(), tiny(attention_impl='fused')
  params = perturb(init(plain, x), scale=0.3)
  a = plain.apply({'params': params}, x, train=False)
  b = fused.apply({'params': params}, x, train=False)
  assert np.abs(a - b).max() <= 2e-5 * np.abs(a).max()


@pytest.mark.parametrize('backend,dtype,cudnn_fails,expected', [
    ('cpu', jnp.bfloat16, False, ['xla']),
    ('gpu', jnp.float32, False, ['xla']),
    ('gpu', jnp.bfloat16, False, ['cudnn']),
    ('gpu', jnp.bfloat16, True, ['cudnn', 'xla']),  # Rejected shape/dtype: XLA, same maths.
])
def test_fused_attention_asks_for_cudnn_only_where_it_applies(monkeypatch, backend, dtype,
                                                              cudnn_fails, expected):
  real, asked = jax.nn.dot_product_attention, []

  def spy(q, k, v, *, implementation=None, **kwargs):
    asked.append(implementation)
    if implementation == 'cudnn':
      if cudnn_fails:
        raise NotImplementedError('cuDNN rejects this')
      assert q.shape[1] % 2 == 0, 'cuDNN gets an even token count (its training kernels need it)'
      implementation = 'xla'  # No GPU here: compute it the XLA way, same arguments.
    return real(q, k, v, implementation=implementation, **kwargs)
  monkeypatch.setattr(jax.nn, 'dot_product_attention', spy)
  monkeypatch.setattr(jax, 'default_backend', lambda: backend)
  # 5 tokens (odd, like ViT's 197): the cuDNN call gets one masked padding token.
  q, k, v = (jax.random.normal(jax.random.key(i), (2, 5, 2, 8)).astype(dtype) for i in range(3))
  out = ops._fused_core(q, k, v)
  assert asked == expected
  np.testing.assert_allclose(np.asarray(out, np.float32),
                             np.asarray(real(q, k, v, implementation='xla'), np.float32))


def test_bfloat16_close_to_float32():
  x = images(2, 32, 32)
  fp32, bf16 = tiny(), tiny(dtype=jnp.bfloat16)
  params = init(bf16, x)
  assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(params))
  params = perturb(params, scale=0.2)
  a = fp32.apply({'params': params}, x, train=False)
  b = bf16.apply({'params': params}, x, train=False)
  assert b.dtype == jnp.float32
  # bf16 has an 8-bit mantissa (~4e-3 relative per op); a few ops accumulate to ~few %.
  assert np.abs(a - b).max() <= 5e-2 * np.abs(a).max()
  assert np.abs(a - b).max() > 0  # it did compute in bf16


def _branches(block_params, x, heads, mlp_dim):
  """Attention and MLP residual branches of one Encoder1DBlock, evaluated by hand."""
  p = block_params
  h = nn.LayerNorm().apply({'params': p['LayerNorm_0']}, x)
  attn = nn.MultiHeadDotProductAttention(num_heads=heads).apply(
      {'params': p['MultiHeadDotProductAttention_0']}, h, h)

  def mlp(v):
    y = nn.LayerNorm().apply({'params': p['LayerNorm_1']}, v)
    return models_vit.MlpBlock(mlp_dim=mlp_dim, dropout_rate=0.).apply(
        {'params': p['MlpBlock_0']}, y, deterministic=True)

  return attn, mlp


def test_stochastic_depth_drops_whole_examples_in_train_mode_only():
  rate, n = 0.5, 64
  block = models_vit.Encoder1DBlock(mlp_dim=32, num_heads=2, dropout_rate=0.,
                                    attention_dropout_rate=0., drop_path_rate=rate)
  x = np.random.default_rng(0).standard_normal((n, 5, 16)).astype(np.float32)
  params = perturb(block.init(jax.random.key(0), x, True)['params'])
  attn, mlp = _branches(params, x, 2, 32)
  scale = 1 / (1 - rate)
  # Every example must be exactly one of the four keep/drop combinations.
  candidates = []
  for keep_attn in (0., scale):
    xa = x + keep_attn * attn
    for keep_mlp in (0., scale):
      candidates.append(xa + keep_mlp * mlp(xa))
  candidates = np.stack(candidates)  # (4, n, tokens, hidden)

  out = block.apply({'params': params}, x, False, rngs={'dropout': jax.random.key(3)})
  err = np.abs(candidates - np.asarray(out)[None]).max(axis=(2, 3))  # (4, n)
  assert np.all(err.min(axis=0) < 1e-4), 'an example mixes kept and dropped tokens/channels'
  combo = err.argmin(axis=0)
  assert len(set(combo.tolist())) == 4, 'all keep/drop combinations should occur in 64 examples'
  # Eval mode: no dropping, no rescaling.
  out = block.apply({'params': params}, x, True)
  xa = x + attn
  np.testing.assert_allclose(out, xa + mlp(xa), atol=1e-5)


def test_stochastic_depth_model():
  x = images(8, 32, 32)
  base, sd = tiny(), tiny(stochastic_depth=0.5)
  params = perturb(init(base, x))
  ref = base.apply({'params': params}, x, train=False)
  np.testing.assert_array_equal(sd.apply({'params': params}, x, train=False), ref)
  np.testing.assert_allclose(base.apply({'params': params}, x, train=True,
                                        rngs={'dropout': jax.random.key(0)}), ref, atol=1e-6)
  out = sd.apply({'params': params}, x, train=True, rngs={'dropout': jax.random.key(0)})
  assert np.abs(out - ref).max() > 1e-4


@pytest.mark.parametrize('impl,posemb', [('xla', 'relative'), ('heads_first', 'learn'),
                                         ('fused', 'relative')])
def test_pad_tokens_once_same_logits_and_gradients(impl, posemb):
  """pad_tokens=8 pads 17 tokens to 24 once; masked keys and dropped rows leave the maths as is."""
  x = images(2, 32, 32)
  plain = tiny(attention_impl=impl, posemb=posemb, classifier='token_unpooled')
  padded = plain.clone(pad_tokens=8)
  params = perturb(init(plain, x))
  assert jax.tree.structure(init(padded, x)) == jax.tree.structure(params)

  def loss(model):
    return lambda p: jnp.sum(model.apply({'params': p}, x, train=False)**2)

  a, b = (jax.jit(lambda p, m=m: m.apply({'params': p}, x, train=False))(params)
          for m in (plain, padded))
  assert a.shape == b.shape == (2, 17, 5)
  np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
  ga, gb = (jax.jit(jax.grad(loss(m)))(params) for m in (plain, padded))
  jax.tree.map(lambda u, v: np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-5), ga, gb)
  # The attention maps an analysis collects keep the plain shape: no padding is applied there.
  _, state = padded.apply({'params': params}, x, train=False, mutable=['intermediates'])
  maps = {w.shape for w in jax.tree.leaves(state['intermediates']) if w.ndim == 4}
  assert maps == {(2, 2, 17, 17)}


@pytest.mark.parametrize('impl', ['xla', 'heads_first'])
def test_attention_keeps_flax_dropout(monkeypatch, impl):
  """Flax passes an attention_fn only the arguments it names: attention dropout must reach it."""
  x = images(2, 32, 32)
  model = tiny(attention_impl=impl,
               transformer={**TINY['transformer'], 'attention_dropout_rate': 0.5})
  params = perturb(init(model, x))
  run = lambda: model.apply({'params': params}, x, train=True,  # noqa: E731
                            rngs={'dropout': jax.random.key(3)})
  ours = run()
  monkeypatch.setitem(ops.ATTENTION_FNS, impl, nn.dot_product_attention)
  np.testing.assert_array_equal(ours, run())
  assert not np.allclose(ours, model.apply({'params': params}, x, train=False))
