"""Published .npz checkpoints: round trips, legacy names, fine-tuning surgery, errors, cache."""

import http.client
import io
import os
import pathlib
import urllib.request

import jax
import numpy as np
import pytest
import scipy.ndimage

from npz_fixtures import images, perturb, published_vit, write_npz
from vit_jax import checkpoint
from vit_jax import models
from vit_jax.checkpoint import CheckpointError
from vit_jax.weights import surgery
from vit_jax.weights import store
from vit_jax import presets
from vit_jax.weights import npz_format


TOKEN = {'family': 'vit', 'classifier': 'token', 'representation_size': None}  # Fields read.


def _transformer(layers=2):
  return dict(mlp_dim=32, num_heads=2, num_layers=layers, attention_dropout_rate=0.,
              dropout_rate=0.)


def vit(num_classes=5, patch=8, **kwargs):
  fields = dict(patches={'size': (patch, patch)}, hidden_size=16, transformer=_transformer(),
                representation_size=None, classifier='token')
  fields.update(kwargs)
  return models.VisionTransformer(num_classes=num_classes, **fields)


def mixer(num_classes=5):
  return models.MlpMixer(patches={'size': (8, 8)}, num_classes=num_classes, num_blocks=2,
                         hidden_dim=16, tokens_mlp_dim=8, channels_mlp_dim=32)


def init(model, size, seed=0):
  x = np.zeros((1, *size, 3), np.float32)
  return model.init(jax.random.key(seed), x, train=False)['params']


def logits(model, params, x):
  return np.asarray(jax.jit(lambda p, x: model.apply({'params': p}, x, train=False))(params, x))


def flat_shapes(params):
  return {k: np.shape(v) for k, v in npz_format.flatten(params).items()}


ROUND_TRIP_MODELS = {
    'vit': (lambda: vit(), (32, 32)),
    'gap': (lambda: vit(classifier='gap'), (32, 32)),
    'representation': (lambda: vit(representation_size=12), (32, 32)),
    # R+ViT-Ti_16 (root only) at 64px: 64 / 4 / 8 → a 2x2 token grid.
    'R+ViT-Ti_16': (lambda: models.get_model('R+ViT-Ti_16', num_classes=5), (64, 64)),
    # A small hybrid with one ResNet stage (unit names, conv_proj, GroupNorm in units).
    'hybrid-stage': (lambda: vit(patch=2, resnet={'num_layers': (1,), 'width_factor': 0.5}),
                     (32, 32)),
    'mixer': (mixer, (32, 32)),
}


@pytest.mark.parametrize('name', sorted(ROUND_TRIP_MODELS))
def test_round_trip(name, tmp_path):
  make, size = ROUND_TRIP_MODELS[name]
  model = make()
  params = perturb(init(model, size))
  x = images(2, *size)
  path = checkpoint.save(params, str(tmp_path / f'{name}.npz'))
  loaded = checkpoint.load(path)
  assert flat_shapes(loaded) == flat_shapes(params)
  jax.tree.map(np.testing.assert_array_equal, loaded, jax.tree.map(np.asarray, params))
  want = logits(model, params, x)
  assert np.abs(want).max() > 1e-3  # a non-trivial head
  np.testing.assert_array_equal(logits(model, loaded, x), want)
  assert os.listdir(tmp_path) == [f'{name}.npz'], 'save leaves no temporary files'


def test_saved_file_uses_published_names(tmp_path):
  params = init(vit(), (32, 32))
  path = checkpoint.save(params, str(tmp_path / 'vit.npz'))
  with np.load(path, allow_pickle=False) as f:
    keys = set(f.files)
    assert f['Transformer/encoderblock_1/MultiHeadDotProductAttention_1/query/kernel'].shape == (
        16, 2, 8)
    assert f['head/kernel'].dtype == np.float32
  block = 'Transformer/encoderblock_0'
  for name in ('LayerNorm_0/scale', 'MultiHeadDotProductAttention_1/out/kernel',
               'LayerNorm_2/bias', 'MlpBlock_3/Dense_0/kernel', 'MlpBlock_3/Dense_1/bias'):
    assert f'{block}/{name}' in keys
  linen_only = ('MultiHeadDotProductAttention_0', 'MlpBlock_0', 'LayerNorm_1')
  assert not any(name in k for k in keys for name in linen_only), sorted(keys)
  assert 'cls' in keys and 'Transformer/posembed_input/pos_embedding' in keys


def test_saved_hybrid_groupnorm_shape(tmp_path):
  model, size = ROUND_TRIP_MODELS['hybrid-stage']
  params = init(model(), size)
  assert params['gn_root']['scale'].shape == (32,)
  path = checkpoint.save(params, str(tmp_path / 'hybrid.npz'))
  with np.load(path, allow_pickle=False) as f:
    assert f['conv_root/kernel'].shape == (7, 7, 3, 32)
    assert f['gn_root/scale'].shape == (1, 1, 1, 32)
    assert f['gn_root/bias'].shape == (1, 1, 1, 32)
    assert f['block1/unit1/gn_proj/scale'].shape == (1, 1, 1, 128)
    assert f['block1/unit1/gn3/bias'].shape == (1, 1, 1, 128)
    assert f['block1/unit1/conv_proj/kernel'].shape == (1, 1, 32, 128)


def test_bfloat16_params_saved_as_float32(tmp_path):
  params = jax.tree.map(lambda a: a.astype(jax.numpy.bfloat16), init(vit(), (32, 32)))
  path = checkpoint.save(params, str(tmp_path / 'bf16.npz'))
  with np.load(path, allow_pickle=False) as f:
    assert {f[k].dtype for k in f.files} == {np.dtype(np.float32)}


@pytest.mark.parametrize('hybrid', [False, True])
def test_hand_built_published_npz(hybrid, tmp_path):
  if hybrid:  # R+ViT-Ti_16 layout (root, no stages) at reduced width: 64px → 2x2 grid.
    model = vit(resnet={'num_layers': (), 'width_factor': 1})
    size, tokens, root = (64, 64), 5, 64
  else:
    model, size, tokens, root = vit(), (32, 32), 17, None
  arrays, linen = published_vit(hidden=16, mlp=32, heads=2, layers=2, patch=8, num_tokens=tokens,
                                num_classes=5, root_width=root)
  assert ('gn_root/scale' in arrays) == hybrid
  path = write_npz(tmp_path / 'published.npz', arrays)
  loaded = checkpoint.load(path)
  surgery.check_tree(loaded, init(model, size), path)
  jax.tree.map(np.testing.assert_array_equal, loaded, linen)
  x = images(2, *size)
  want = logits(model, linen, x)
  assert np.abs(want).max() > 1e-2
  np.testing.assert_array_equal(logits(model, loaded, x), want)


def test_hand_built_npz_with_linen_names(tmp_path):
  _, linen = published_vit(hidden=16, mlp=32, heads=2, layers=2, patch=8, num_tokens=17,
                           num_classes=5, representation_size=12, seed=1)
  flat = {}

  def walk(tree, prefix):
    for k, v in tree.items():
      if isinstance(v, dict):
        walk(v, f'{prefix}{k}/')
      else:
        flat[f'{prefix}{k}'] = v

  walk(linen, '')
  assert 'Transformer/encoderblock_0/MultiHeadDotProductAttention_0/query/kernel' in flat
  loaded = checkpoint.load(write_npz(tmp_path / 'linen.npz', flat))
  jax.tree.map(np.testing.assert_array_equal, loaded, linen)
  model = vit(representation_size=12)
  x = images(2, 32, 32)
  np.testing.assert_array_equal(logits(model, loaded, x), logits(model, linen, x))


def _pretrained(tmp_path, model=None, size=(32, 32), name='pre.npz'):
  model = model or vit()
  params = perturb(init(model, size), seed=5)
  return checkpoint.save(params, str(tmp_path / name)), params


def test_load_pretrained_new_head(tmp_path):
  path, pre = _pretrained(tmp_path)
  target = vit(num_classes=3)
  init_params = init(target, (32, 32), seed=1)
  out = checkpoint.load_pretrained(pretrained_path=path, init_params=init_params,
                                   model_config=TOKEN)
  np.testing.assert_array_equal(out['head']['kernel'], init_params['head']['kernel'])
  np.testing.assert_array_equal(out['head']['bias'], init_params['head']['bias'])
  assert out['head']['kernel'].shape == (16, 3)
  pre.pop('head')
  out.pop('head')
  jax.tree.map(np.testing.assert_array_equal, out, jax.tree.map(np.asarray, pre))


def test_load_pretrained_drops_pre_logits(tmp_path):
  path, _ = _pretrained(tmp_path, vit(representation_size=12))
  assert 'pre_logits/kernel' in np.load(path).files
  target = vit(num_classes=3)
  out = checkpoint.load_pretrained(pretrained_path=path, init_params=init(target, (32, 32)),
                                   model_config=TOKEN)
  assert 'pre_logits' not in out
  assert flat_shapes(out) == flat_shapes(init(target, (32, 32)))
  # Keeping the representation layer when the fine-tuning model has one.
  target = vit(num_classes=3, representation_size=12)
  out = checkpoint.load_pretrained(pretrained_path=path, init_params=init(target, (32, 32)),
                                   model_config=dict(TOKEN, representation_size=12))
  assert out['pre_logits']['kernel'].shape == (16, 12)


def _zoom_reference(posemb, old, new):
  """The official resize: class row kept, grid zoomed with scipy (order=1)."""
  grid = posemb[0, 1:].reshape(*old, -1)
  zoomed = scipy.ndimage.zoom(grid, (new[0] / old[0], new[1] / old[1], 1), order=1)
  return np.concatenate([posemb[:, :1], zoomed.reshape(1, new[0] * new[1], -1)], axis=1)


@pytest.mark.parametrize('image,grid', [((384, 384), (24, 24)), ((384, 512), (24, 32))])
def test_load_pretrained_resizes_posemb(image, grid, tmp_path):
  small = dict(patch=16, transformer=_transformer(layers=1))
  path, pre = _pretrained(tmp_path, vit(**small), size=(224, 224))
  target = vit(num_classes=3, **small)
  init_params = init(target, image)
  assert init_params['Transformer']['posembed_input']['pos_embedding'].shape == (
      1, 1 + grid[0] * grid[1], 16)
  out = checkpoint.load_pretrained(
      pretrained_path=path, init_params=init_params, model_config=TOKEN,
      grid_shape=None if grid[0] == grid[1] else models.token_grid(
          {'family': 'vit', 'patches': {'size': (16, 16)}}, image))
  old = np.asarray(pre['Transformer']['posembed_input']['pos_embedding'])
  got = out['Transformer']['posembed_input']['pos_embedding']
  np.testing.assert_allclose(got, _zoom_reference(old, (14, 14), grid), atol=1e-5)
  np.testing.assert_array_equal(got[0, 0], old[0, 0])  # class token row untouched
  # Corners are aligned: the four corner cells keep their values.
  np.testing.assert_allclose(got[0, 1], old[0, 1], atol=1e-6)
  np.testing.assert_allclose(got[0, -1], old[0, -1], atol=1e-6)
  x = images(1, *image)
  assert np.isfinite(logits(target, out, x)).all()


def test_load_pretrained_non_square_needs_grid_shape(tmp_path):
  small = dict(patch=16, transformer=_transformer(layers=1))
  path, _ = _pretrained(tmp_path, vit(**small), size=(224, 224))
  init_params = init(vit(**small), (48, 64))  # 3x4 grid: not square
  with pytest.raises(CheckpointError, match='square'):
    checkpoint.load_pretrained(pretrained_path=path, init_params=init_params,
                               model_config=TOKEN)


def test_resize_posemb_gap_and_identity():
  rng = np.random.default_rng(0)
  pe = rng.standard_normal((1, 16, 8)).astype(np.float32)  # gap: no class row
  np.testing.assert_array_equal(surgery.resize_posemb(pe, (4, 4), num_prefix_tokens=0), pe)
  pe_cls = rng.standard_normal((1, 17, 8)).astype(np.float32)
  np.testing.assert_array_equal(
      surgery.resize_posemb(pe_cls, (4, 4), num_prefix_tokens=1), pe_cls)
  out = surgery.resize_posemb(pe, (6, 2), num_prefix_tokens=0)
  want = scipy.ndimage.zoom(pe[0].reshape(4, 4, 8), (6 / 4, 2 / 4, 1), order=1)
  np.testing.assert_allclose(out, want.reshape(1, 12, 8), atol=1e-5)
  # A non-square old grid has to be named.
  pe_rect = rng.standard_normal((1, 1 + 12, 8)).astype(np.float32)
  out = surgery.resize_posemb(pe_rect, (6, 8), num_prefix_tokens=1, old_grid=(3, 4))
  np.testing.assert_allclose(out, _zoom_reference(pe_rect, (3, 4), (6, 8)), atol=1e-5)


def test_resize_posemb_linear_ramp_stays_linear():
  oh, ow, nh, nw, d = 14, 14, 24, 32, 3
  a, b, c = 0.3, -0.7, 2.0

  def ramp(h, w):  # value = a * row + b * col + c in units of the old grid (corners aligned)
    rows = np.linspace(0, oh - 1, h)[:, None]
    cols = np.linspace(0, ow - 1, w)[None, :]
    grid = a * rows + b * cols + c
    return np.repeat(grid[..., None], d, axis=-1).reshape(1, h * w, d)

  cls = np.full((1, 1, d), 42., np.float32)
  pe = np.concatenate([cls, ramp(oh, ow)], axis=1).astype(np.float32)
  out = surgery.resize_posemb(pe, (nh, nw), num_prefix_tokens=1)
  assert out.shape == (1, 1 + nh * nw, d)
  np.testing.assert_array_equal(out[:, :1], cls)
  np.testing.assert_allclose(out[:, 1:], ramp(nh, nw), atol=1e-5)


def test_missing_file(tmp_path):
  path = str(tmp_path / 'nope' / 'ViT-B_16.npz')
  with pytest.raises(CheckpointError, match='Could not find') as e:
    checkpoint.load(path)
  assert path in str(e.value)


def test_truncated_npz(tmp_path):
  path, _ = _pretrained(tmp_path)
  data = pathlib.Path(path).read_bytes()
  pathlib.Path(path).write_bytes(data[:len(data) // 2])
  with pytest.raises(CheckpointError, match='truncated or corrupt'):
    checkpoint.load(path)


@pytest.mark.parametrize('content', [b'', b'not a zip file at all' * 10, b'PK\x03\x04' + b'\0' * 50,
                                     b'\x93NUMPY garbage'])
def test_corrupt_bytes(content, tmp_path):
  path = tmp_path / 'corrupt.npz'
  path.write_bytes(content)
  with pytest.raises(CheckpointError, match=str(path)):
    checkpoint.load(str(path))


def test_single_npy_is_rejected(tmp_path):
  path = str(tmp_path / 'array.npy')
  np.save(path, np.zeros(3))
  with pytest.raises(CheckpointError):
    checkpoint.load(path)


def test_npz_of_another_model(tmp_path):
  # Same token count, other width and depth: every difference is listed in one error.
  path, _ = _pretrained(tmp_path, vit(hidden_size=12, transformer=_transformer(layers=1)))
  target = vit(num_classes=5)
  with pytest.raises(CheckpointError) as e:
    checkpoint.load_pretrained(pretrained_path=path, init_params=init(target, (32, 32)),
                               model_config=TOKEN)
  message = str(e.value)
  assert len(message) <= 300 and 'pre.npz does not fit the model' in message
  assert '16 missing (Transformer/encoderblock_1/' in message
  assert '21 misshaped (Transformer/encoder_norm/bias (12,) vs model (16,)' in message
  # A Mixer file into a ViT: names that exist only in the file are listed as extra.
  mixer_path = checkpoint.save(init(mixer(), (32, 32)), str(tmp_path / 'mixer.npz'))
  with pytest.raises(CheckpointError, match=r'extra \(MixerBlock_0/') as e:
    checkpoint.load_pretrained(pretrained_path=mixer_path, init_params=init(target, (32, 32)),
                               model_config=TOKEN)
  assert 'missing (Transformer/' in str(e.value) and ', ...' in str(e.value)  # lists cut
  assert len(str(e.value)) <= 300


def test_npz_of_other_classifier(tmp_path):
  # A gap file (no class token) into a token model: the error names cls and the posemb shape.
  path, _ = _pretrained(tmp_path, vit(classifier='gap'))
  with pytest.raises(CheckpointError, match=r'1 missing \(cls\);.*pos_embedding '
                     r'\(1, 16, 16\) vs model \(1, 17, 16\)'):
    checkpoint.load_pretrained(pretrained_path=path, init_params=init(vit(), (32, 32)),
                               model_config=TOKEN)


class FakeResponse:
  """A urlopen() result serving `data`, optionally announcing more or failing mid-way."""

  def __init__(self, data, *, content_length=None, fail_after=None):
    self._data = io.BytesIO(data)
    self._fail_after = fail_after
    length = len(data) if content_length is None else content_length
    self.headers = {'Content-Length': str(length)}

  def read(self, n=-1):
    if self._fail_after is not None:
      if self._data.tell() >= self._fail_after:
        raise self._error
      n = min(n, self._fail_after - self._data.tell())
    return self._data.read(n)

  def __enter__(self):
    return self

  def __exit__(self, *args):
    return False


@pytest.fixture
def fake_remote(monkeypatch, tmp_path):
  """Serves one real .npz for any URL; records the URLs asked for. No network."""
  source, params = _pretrained(tmp_path, name='served.npz')
  data = pathlib.Path(source).read_bytes()
  calls = []
  behaviour = {}

  def urlopen(url, *args, **kwargs):
    calls.append(url if isinstance(url, str) else url.full_url)
    response = FakeResponse(data, **behaviour.get('kwargs', {}))
    response._error = behaviour.get('error', ConnectionResetError('connection reset'))
    return response

  monkeypatch.setattr(urllib.request, 'urlopen', urlopen)
  return dict(calls=calls, behaviour=behaviour, params=params, size=len(data))


def test_gs_path_downloads_once_into_cache(fake_remote, tmp_path):
  cache = tmp_path / 'cache'
  path = 'gs://vit_models/imagenet21k/ViT-tiny.npz'
  loaded = checkpoint.load(path, cache_dir=str(cache))
  assert fake_remote['calls'] == [
      'https://storage.googleapis.com/vit_models/imagenet21k/ViT-tiny.npz']
  local = cache / 'vit_models' / 'imagenet21k' / 'ViT-tiny.npz'
  assert local.is_file() and local.stat().st_size == fake_remote['size']
  assert os.listdir(local.parent) == ['ViT-tiny.npz']
  jax.tree.map(np.testing.assert_array_equal, loaded,
               jax.tree.map(np.asarray, fake_remote['params']))
  checkpoint.load(path, cache_dir=str(cache))  # second load: from the cache
  assert len(fake_remote['calls']) == 1


def test_cache_dir_from_environment(fake_remote, tmp_path, monkeypatch):
  monkeypatch.setenv('VIT_JAX_CACHE', str(tmp_path / 'env_cache'))
  assert store.default_cache_dir() == str(tmp_path / 'env_cache')
  checkpoint.load('https://example.com/models/x.npz')
  assert fake_remote['calls'] == ['https://example.com/models/x.npz']
  assert (tmp_path / 'env_cache' / 'example.com' / 'models' / 'x.npz').is_file()


def test_default_cache_is_the_users_cache_folder(tmp_path, monkeypatch):
  """An installed package (no checkpoints/README.md beside it) downloads into the user cache."""
  monkeypatch.delenv('VIT_JAX_CACHE', raising=False)
  monkeypatch.setattr(store, 'SOURCE_ROOT', str(tmp_path / 'site-packages'))
  monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'xdg'))
  assert store.default_cache_dir() == str(tmp_path / 'xdg' / 'vit_jax')
  monkeypatch.delenv('XDG_CACHE_HOME')
  monkeypatch.setenv('HOME', str(tmp_path / 'home'))
  assert store.default_cache_dir() == str(tmp_path / 'home' / '.cache' / 'vit_jax')


def test_a_clone_downloads_into_its_checkpoints_folder(tmp_path, monkeypatch):
  """This clone has the catalogue, so checkpoints/ is where downloads land; the env wins."""
  monkeypatch.delenv('VIT_JAX_CACHE', raising=False)
  root = pathlib.Path(__file__).resolve().parent.parent
  assert (root / 'checkpoints' / 'README.md').is_file()
  assert store.default_cache_dir() == str(root / 'checkpoints')
  monkeypatch.setenv('VIT_JAX_CACHE', str(tmp_path / 'env'))
  assert store.default_cache_dir() == str(tmp_path / 'env')


def test_download_from_a_local_server_into_the_clone_then_read_from_either_place(
    tmp_path, monkeypatch):
  """Over real HTTP: fetched once into a clone's checkpoints/, read there; a file already in
  the user cache is read from there and not fetched again."""
  import functools  # noqa: PLC0415
  import http.server  # noqa: PLC0415
  import threading  # noqa: PLC0415
  served = tmp_path / 'served'
  source, params = _pretrained(tmp_path, name='x.npz')
  (served / 'models').mkdir(parents=True)
  pathlib.Path(source).rename(served / 'models' / 'ViT-tiny.npz')
  requests = []

  class Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
      requests.append(self.path)

  server = http.server.ThreadingHTTPServer(
      ('127.0.0.1', 0), functools.partial(Handler, directory=str(served)))
  threading.Thread(target=server.serve_forever, daemon=True).start()
  clone = tmp_path / 'clone'
  (clone / 'checkpoints').mkdir(parents=True)
  (clone / 'checkpoints' / 'README.md').write_text('catalogue')
  monkeypatch.delenv('VIT_JAX_CACHE', raising=False)
  monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'xdg'))
  monkeypatch.setattr(store, 'SOURCE_ROOT', str(clone))
  host = f'127.0.0.1:{server.server_port}'
  try:
    url = f'http://{host}/models/ViT-tiny.npz'
    loaded = checkpoint.load(url)
    local = clone / 'checkpoints' / host / 'models' / 'ViT-tiny.npz'
    assert local.is_file() and len(requests) == 1
    checkpoint.load(url)  # Read from checkpoints/, not fetched again.
    assert len(requests) == 1
    other = f'http://{host}/models/other.npz'  # Already in the user cache: read there.
    user_copy = tmp_path / 'xdg' / 'vit_jax' / host / 'models' / 'other.npz'
    user_copy.parent.mkdir(parents=True)
    user_copy.write_bytes(local.read_bytes())
    checkpoint.load(other)
    assert len(requests) == 1
    assert not (clone / 'checkpoints' / host / 'models' / 'other.npz').exists()
  finally:
    server.shutdown()
  jax.tree.map(np.testing.assert_array_equal, loaded, jax.tree.map(np.asarray, params))


def test_a_download_in_the_old_cache_is_read_not_fetched_again(fake_remote, tmp_path,
                                                               monkeypatch):
  """Versions before 2026-11-27 cached into `$VIT_JAX_CHECKPOINTS` (or `checkpoints/`): a file
  there loads without a download and nothing is written into the new cache."""
  old, new = tmp_path / 'old_cache', tmp_path / 'new_cache'
  monkeypatch.setenv('VIT_JAX_CHECKPOINTS', str(old))
  monkeypatch.setenv('VIT_JAX_CACHE', str(new))
  url = 'https://example.com/models/x.npz'
  checkpoint.load(url, cache_dir=str(old))  # Downloaded by the "old version".
  assert fake_remote['calls'] == [url]
  loaded = checkpoint.load(url)
  assert fake_remote['calls'] == [url] and not new.exists()
  jax.tree.map(np.testing.assert_array_equal, loaded,
               jax.tree.map(np.asarray, fake_remote['params']))
  assert store.check_available(store.locate(url)) is None


def test_published_dirs():
  assert presets.PUBLISHED_DIRS['imagenet21k'] == 'gs://vit_models/imagenet21k'
  assert presets.PUBLISHED_DIRS['augreg'] == 'gs://vit_models/augreg'
  assert store.cache_path('gs://mixer_models/imagenet1k/Mixer-B_16.npz', '/c') == (
      '/c/mixer_models/imagenet1k/Mixer-B_16.npz')


@pytest.mark.parametrize('cut', ['short_body', 'connection_reset', 'incomplete_read'])
def test_cut_download_leaves_no_file(cut, fake_remote, tmp_path):
  behaviour = fake_remote['behaviour']
  size = fake_remote['size']
  if cut == 'short_body':  # The server announces more bytes than it sends.
    behaviour['kwargs'] = dict(content_length=size + 1000)
  else:
    behaviour['kwargs'] = dict(fail_after=size // 2)
    if cut == 'incomplete_read':
      behaviour['error'] = http.client.IncompleteRead(b'', size // 2)
  cache = tmp_path / 'cache'
  path = 'gs://vit_models/imagenet21k/cut.npz'
  with pytest.raises(CheckpointError, match='cut.npz'):
    checkpoint.load(path, cache_dir=str(cache))
  folder = cache / 'vit_models' / 'imagenet21k'
  assert not (folder / 'cut.npz').exists()
  assert not folder.exists() or os.listdir(folder) == [], 'no partial or temporary files'
  # The next attempt downloads again (and succeeds once the server behaves).
  behaviour.clear()
  checkpoint.load(path, cache_dir=str(cache))
  assert len(fake_remote['calls']) == 2
  assert os.listdir(folder) == ['cut.npz']


def test_best_augreg_filename_reads_the_index(tmp_path):
  (tmp_path / 'index.csv').write_text(
      'name,ds,final_val,filename\n'
      'B/16,i21k,0.40,B_16-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0\n'
      'B/16,i21k,0.47,B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0\n'
      'B/16,i1k,0.90,B_16-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.1-sd_0.1\n'
      'S/16,i21k,0.99,S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0\n')
  assert store.best_augreg_filename('B_16', str(tmp_path)) == (
      'B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0')
  with pytest.raises(CheckpointError, match='No i21k AugReg checkpoint'):
    store.best_augreg_filename('L_16', str(tmp_path))
