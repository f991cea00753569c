"""The ResNet classifier, and the hybrid ResNet's faster GroupNorm, max-pool and root conv."""

import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax import checkpoint
from vit_jax import models
from vit_jax import models_resnet
from vit_jax import ops
from vit_jax.weights import loading


def _random(shape, seed=0, loc=0.):
  return jnp.asarray(np.random.default_rng(seed).normal(loc, 2., size=shape), jnp.float32)


def _random_params(params, seed=1):
  leaves, tree = jax.tree.flatten(params)
  return jax.tree.unflatten(tree, [_random(a.shape, seed + i) for i, a in enumerate(leaves)])


@pytest.mark.parametrize('shape', [(3, 5, 7, 64), (2, 9, 256), (4, 6, 6, 32)])
def test_group_norm_matches_flax_values_gradients_and_params(shape):
  x = _random(shape, loc=1.5)
  ours, flax_gn = ops.GroupNorm(), nn.GroupNorm()
  params = _random_params(flax_gn.init(jax.random.key(0), x))
  assert jax.tree.map(jnp.shape, ours.init(jax.random.key(0), x)) == jax.tree.map(
      jnp.shape, params)
  np.testing.assert_allclose(ours.apply(params, x), flax_gn.apply(params, x), atol=2e-5)

  def grads(module):
    loss = lambda p, x: jnp.sum(jnp.sin(module.apply(p, x)))  # noqa: E731
    return jax.grad(loss, argnums=(0, 1))(params, x)

  for got, want in zip(jax.tree.leaves(grads(ours)), jax.tree.leaves(grads(flax_gn))):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(jnp.abs(want).max()))


def test_group_norm_keeps_dtype_and_zero_scale_init():
  x = _random((2, 4, 4, 64)).astype(jnp.bfloat16)
  module = ops.GroupNorm(dtype=jnp.bfloat16, scale_init=nn.initializers.zeros)
  params = module.init(jax.random.key(0), x)
  assert params['params']['scale'].dtype == jnp.float32
  out = module.apply(params, x)
  assert out.dtype == jnp.bfloat16 and not jnp.any(out)


def test_group_norm_rejects_channels_not_divisible_by_groups():
  with pytest.raises(ValueError, match='48 channels do not split into 32 groups'):
    ops.GroupNorm().init(jax.random.key(0), jnp.zeros((1, 2, 2, 48)))


@pytest.mark.parametrize('shape', [(2, 28, 28, 64), (2, 7, 7, 3), (1, 8, 9, 2), (1, 1, 1, 2),
                                   (2, 56, 14, 5)])
def test_max_pool_same_matches_flax_values_and_gradients(shape):
  x = _random(shape)
  want = nn.max_pool(x, (3, 3), (2, 2), padding='SAME')
  np.testing.assert_array_equal(ops.max_pool_same(x), want)
  # Random inputs have no ties, so both gradients route to the same (unique) maxima.
  loss = lambda pool: jax.grad(lambda v: jnp.sum(jnp.sin(pool(v))))(x)  # noqa: E731
  np.testing.assert_allclose(
      loss(ops.max_pool_same),
      loss(lambda v: nn.max_pool(v, (3, 3), (2, 2), padding='SAME')), rtol=1e-6)


def test_max_pool_same_other_window_and_stride():
  x = _random((2, 11, 10, 4))
  np.testing.assert_array_equal(ops.max_pool_same(x, window=2, stride=3),
                                nn.max_pool(x, (2, 2), (3, 3), padding='SAME'))


@pytest.mark.parametrize('shape,kernel,strides', [
    ((2, 56, 56, 3), (7, 7), (2, 2)), ((1, 9, 8, 3), (7, 7), (2, 2)),
    ((2, 5, 7, 4), (3, 3), (1, 1)), ((1, 11, 10, 2), (4, 2), (3, 2)),
    ((1, 1, 1, 3), (7, 7), (2, 2))])
def test_conv_as_matmul_matches_lax_convolution(shape, kernel, strides):
  x, w = _random(shape), _random(kernel + (shape[-1], 16), seed=3)
  want = jax.lax.conv_general_dilated(x, w, strides, 'SAME',
                                      dimension_numbers=('NHWC', 'HWIO', 'NHWC'))
  got = ops.conv_as_matmul(x, w, strides)
  assert got.shape == want.shape
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_std_conv_as_matmul_has_std_conv_params_values_and_gradients():
  x = _random((2, 20, 18, 3))
  ours = models_resnet.StdConvAsMatmul(64, (7, 7), (2, 2))
  flax_conv = models_resnet.StdConv(64, (7, 7), (2, 2))
  params = flax_conv.init(jax.random.key(0), x)
  assert jax.tree.map(jnp.shape, ours.init(jax.random.key(0), x)) == jax.tree.map(
      jnp.shape, params)
  np.testing.assert_allclose(ours.apply(params, x), flax_conv.apply(params, x), rtol=1e-5,
                             atol=1e-4)
  # A fixed cotangent keeps the gradient linear in the outputs (sin() of outputs ~500 would turn
  # fp32 rounding in the forward pass into large differences of the cotangent).
  cotangent = _random(flax_conv.apply(params, x).shape, seed=5)
  grad = lambda m: jax.grad(lambda p: jnp.vdot(m.apply(p, x), cotangent))(params)  # noqa: E731
  want = grad(flax_conv)['params']['kernel']
  # Weight standardisation's backward cancels terms ~600 down to ~0: judge errors at that scale.
  np.testing.assert_allclose(grad(ours)['params']['kernel'], want, rtol=1e-5,
                             atol=2e-5 * float(jnp.max(jnp.abs(want))))


def _resnet_params(name, num_classes, size):
  model = models.get_model(name, num_classes=num_classes)
  params = model.init(jax.random.key(0), jnp.zeros((1, size, size, 3)), train=False)['params']
  return model, params


def test_resnet_classifier_names_zero_head_and_shapes():
  model, params = _resnet_params('ResNet-11_28px', 10, 28)
  assert sorted(params) == ['block1', 'block2', 'block3', 'conv_root', 'gn_root', 'head']
  assert sorted(params['block2']['unit1']) == ['conv1', 'conv2', 'conv3', 'conv_proj', 'gn1',
                                               'gn2', 'gn3', 'gn_proj']
  assert params['conv_root']['kernel'].shape == (3, 3, 3, 32)
  assert params['head']['kernel'].shape == (512, 10)
  x = _random((3, 28, 28, 3))
  np.testing.assert_array_equal(model.apply({'params': params}, x, train=False), 0.)  # Zero head.
  params = _random_params(params)
  logits = model.apply({'params': params}, x, train=True)
  assert logits.shape == (3, 10) and logits.dtype == jnp.float32
  np.testing.assert_array_equal(logits, model.apply({'params': params}, x, train=False))


@pytest.mark.parametrize('name,size', [('ResNet-50', 224), ('ResNet-50', 33),
                                       ('ResNet-50_32px', 32), ('ResNet-11_28px', 28),
                                       ('ResNet-11_28px', 31), ('ResNet-18_28px', 28)])
def test_token_grid_is_the_last_feature_map(name, size):
  config = models.get_config(name)

  class Features(nn.Module):
    @nn.compact
    def __call__(self, x):
      return models_resnet.apply_resnet(
          x, width_factor=config.width_factor, num_layers=config.stage_sizes,
          dtype=jnp.float32, param_dtype=jnp.float32, root_kernel=config.root_kernel,
          root_stride=config.root_stride, root_pool=config.root_pool,
          unit=config.get('unit', 'bottleneck'))

  x = jax.ShapeDtypeStruct((1, size, size, 3), jnp.float32)
  out = jax.eval_shape(lambda x: Features().init_with_output(jax.random.key(0), x)[0], x)
  assert tuple(models.token_grid(config, (size, size))) == out.shape[1:3]


def test_resnet_checkpoint_round_trip_keeps_published_groupnorm_shapes(tmp_path):
  _, params = _resnet_params('ResNet-11_28px', 10, 28)
  params = _random_params(params)
  path = checkpoint.save(params, str(tmp_path / 'resnet.npz'))
  with np.load(path) as f:
    assert f['gn_root/scale'].shape == (1, 1, 1, 32)
    assert f['block3/unit1/gn_proj/bias'].shape == (1, 1, 1, 512)
    assert f['head/kernel'].shape == (512, 10)
  loaded = checkpoint.load(path)
  assert jax.tree.structure(loaded) == jax.tree.structure(params)
  for got, want in zip(jax.tree.leaves(loaded), jax.tree.leaves(params)):
    np.testing.assert_array_equal(got, want)


def test_resnet18_has_basic_units_that_start_as_the_identity_and_reads_back_by_its_shapes():
  """ResNet-18_28px: torchvision's resnet18 layout (two 3x3 convs per unit, widths 64-512, a
  projection only where channels or stride change) at 28px, no max-pool: 28, 28, 14, 7, 4."""
  from vit_jax.weights import architecture
  model, params = _resnet_params('ResNet-18_28px', 10, 28)
  assert sorted(params['block1']['unit1']) == ['conv1', 'conv2', 'gn1', 'gn2']
  assert sorted(params['block2']['unit1']) == ['conv1', 'conv2', 'conv_proj', 'gn1', 'gn2',
                                               'gn_proj']
  assert params['block2']['unit1']['conv1']['kernel'].shape == (3, 3, 64, 128)
  assert params['block4']['unit2']['conv2']['kernel'].shape == (3, 3, 512, 512)
  assert params['head']['kernel'].shape == (512, 10)
  # Zero-init gn2 scale: an unprojected unit passes its (ReLU'd, so >= 0) input through.
  unit = models_resnet.BasicUnit(64)
  x = jax.nn.relu(_random((2, 7, 7, 64)))
  np.testing.assert_allclose(unit.apply(unit.init(jax.random.key(0), x), x), x, atol=1e-6)
  found = architecture.architecture(params)
  assert found.model_name == 'ResNet-18_28px' and not found.assumed
  assert (found.config.unit, found.config.root_pool) == ('basic', False)
  logits = models.get_model(found.config, num_classes=10).apply(
      {'params': _random_params(params)}, _random((2, 28, 28, 3)), train=False)
  assert logits.shape == (2, 10)
  # Basic units in stages no preset has: a name that says so, the root's pooling assumed.
  _, other = _resnet_params(dict(models.get_config('ResNet-18_28px'), stage_sizes=(1, 1)), 10,
                            28)
  found = architecture.architecture(other)
  assert found.model_name == 'ResNet-custom-basic-1-1-w1-root3', found.model_name
  # Compared with a bottleneck ResNet, the unit is the difference named first; a config written
  # before `unit` existed is a bottleneck one.
  old = {k: v for k, v in models.get_config('ResNet-11_28px').items() if k != 'unit'}
  assert architecture.first_difference(found.config, old, 'ResNet-11_28px') == (
      'ResNet unit basic in the file, bottleneck in ResNet-11_28px')
  assert architecture.first_difference(models.get_config('ResNet-11_28px'), old, 'x') is None
  with pytest.raises(ValueError, match="Unknown ResNet unit='wide'; use one of bottleneck, basic"):
    _resnet_params(dict(models.get_config('ResNet-18_28px'), unit='wide'), 10, 28)


def test_a_bottleneck_resnet_config_is_what_it_was_before_resnet18():
  """A ResNet run recorded before `unit` existed resumes: its config has no new field."""
  from vit_jax import config_lib
  from vit_jax.training import run_record
  for name in ('ResNet-50', 'ResNet-50_32px', 'ResNet-11_28px'):
    now = run_record._plain(config_lib.with_model(config_lib.get_config(), name))
    recorded = json.loads(json.dumps(now))
    recorded['model'].pop('unit', None)  # What a run's record.json held on 2026-12-01.
    assert run_record._config_changes(recorded, now) == [], name
  r18 = run_record._plain(config_lib.with_model(config_lib.get_config(), 'ResNet-18_28px'))
  recorded = json.loads(json.dumps(r18))
  recorded['model'].pop('unit')
  assert run_record._config_changes(recorded, r18) == [
      "config model.unit is 'basic' (was None)"]


def test_hybrid_root_is_unchanged_by_the_resnet_options():
  """The hybrid's defaults are the official root: the same names, shapes and values."""
  x = _random((1, 32, 32, 3))

  class Root(nn.Module):
    kwargs: dict

    @nn.compact
    def __call__(self, x):
      return models_resnet.apply_resnet(x, width_factor=1, num_layers=(1,), dtype=jnp.float32,
                                        param_dtype=jnp.float32, **self.kwargs)

  params = Root({}).init(jax.random.key(0), x)
  explicit = Root(dict(root_kernel=7, root_stride=2, root_pool=True))
  assert params['params']['conv_root']['kernel'].shape == (7, 7, 3, 64)
  np.testing.assert_array_equal(Root({}).apply(params, x), explicit.apply(params, x))


def test_resnet_trains_exports_predicts_and_teaches_a_vit(tmp_path, capsys):
  """The ViT paths end to end: train → params.npz → predict; then a ViT distils from that npz."""
  import tensorflow_datasets as tfds
  from test_train import make_config
  from vit_jax import config_lib, train
  from vit_jax.tools import cli
  from vit_jax.tools import predict
  config = make_config(total_steps=3, eval_every=0)
  config.model = config_lib.with_model(config_lib.get_config(), 'ResNet-11_28px').model
  workdir = str(tmp_path / 'resnet')
  with tfds.testing.mock_data(num_examples=10):
    result = train.train_and_evaluate(config, workdir)
    assert result['step'] == 3 and result['num_examples'] == 10
    npz = os.path.join(workdir, 'params.npz')
    student = make_config(total_steps=2, eval_every=0,
                          distill=dict(teacher_path=npz, teacher_model='ResNet-11_28px'))
    assert train.train_and_evaluate(student, str(tmp_path / 'student'))['step'] == 2
  image = tmp_path / 'image.png'
  from PIL import Image
  Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(
      image)
  assert cli.call(predict, ['predict', f'--checkpoint={npz}', '--model=ResNet-11_28px',
                            '--image_size=32', '--json', str(image)]) == 0
  top = json.loads(capsys.readouterr().out)['results'][0]['predictions']
  from vit_jax.data import image_ops
  loaded = loading.load_model(npz, 'ResNet-11_28px', 32)
  logits = loaded.model.apply({'params': loaded.params}, image_ops.load_images([str(image)], 32),
                              train=False)[0]
  probs = np.asarray(jax.nn.softmax(logits))
  # After 3 steps the classes are nearly tied: compare the probabilities of the listed classes.
  np.testing.assert_allclose([p['probability'] for p in top], probs[[p['index'] for p in top]],
                             rtol=1e-5)
  np.testing.assert_allclose([p['probability'] for p in top], np.sort(probs)[::-1][:5],
                             rtol=1e-5)
