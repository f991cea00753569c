"""timm's architecture table: equal to timm's own definitions; hub folders load by it.

`vit_jax/weights/timm/architectures.json` (read by `timm_architectures`) holds every ViT, DeiT,
Swin and eva-module architecture of timm with published weights (235 in timm 1.0.31).
`test_table_equals_timm` regenerates it in memory from timm and compares every entry;
`test_file_is_what_the_generator_writes` pins the file's format both ways.
`test_hub_folder_as_published` covers every entry: the table's entries fall into 63 groups that
differ only in sizes (width, heads, MLP width, depth, patch, image, classes); one architecture
per group (the smallest, or the one named in NAMED) is built by timm at its real width with one
block per stage and a 2x2 patch grid (Swin: its window x 32 px), noised, and saved as the hub
publishes it (model.safetensors + config.json with `architecture` and `pretrained_cfg`, no
`model_args`). This package loads it with timm's logits (within 2e-5 of the largest) or refuses
it in one line naming it; a loaded ViT exported back (`timm_export`) names the same architecture
with model_args for what differs only, and timm rebuilds it with the same logits.
What distinguishes the members of a group (heads, widths) is checked for each of them by the
table test.
"""

import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax import models
from vit_jax.weights import loading
from vit_jax.weights.timm import architectures as timm_architectures
from vit_jax.weights.timm import export as timm_export
from vit_jax.weights.timm import declared as timm_declared
from vit_jax.families.vit import timm as timm_vit
from vit_jax.weights.npz_format import CheckpointError

torch = pytest.importorskip('torch')
timm = pytest.importorskip('timm')
from timm.models import save_for_hf  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'benchmarks'))
import gen_timm_architectures  # noqa: E402  # A script in benchmarks/, not part of the package.

TABLE = timm_architectures.ARCHITECTURES
# Fields in which members of one group differ (sizes); everything else is the same.
SIZES = ('img_size', 'depth', 'depths', 'num_classes', 'embed_dim', 'num_heads', 'mlp_dim',
         'attn_pool_num_heads', 'attn_pool_mlp_dim', 'patch_size', 'mlp_ratio', 'window_size',
         'num_kv_heads', 'rope_reference', 'weights')
# Named by issue 40: 14 heads of width 64 (not 16), SigLIP-2's tanh GELU (not exact).
NAMED = ('vit_so150m_patch16_reg4_gap_256', 'vit_so400m_patch16_siglip_256')


def _signature(entry):
  sig = tuple((k, v is not None if k == 'init_values' else v)
              for k, v in sorted(entry.items()) if k not in SIZES)
  return sig + ((len(set(entry['window_size'])) == 1,) if entry['family'] == 'swin' else ())


def _cost(name):
  entry = TABLE[name]
  return entry['embed_dim'] * (entry.get('mlp_dim') or entry['embed_dim'] * 4)


def representatives():
  """One architecture per group of entries alike but for their sizes (NAMED first)."""
  groups = {}
  for name in sorted(TABLE, key=lambda n: (n not in NAMED, _cost(n), n)):
    groups.setdefault(_signature(TABLE[name]), name)
  return sorted(groups.values())


def test_table_equals_timm():
  """Every entry (and timm's class defaults) as timm's own definitions give it today."""
  assert timm.__version__ == timm_architectures.TIMM_VERSION, (
      f'timm {timm.__version__}: regenerate with {gen_timm_architectures.COMMAND}')
  names = gen_timm_architectures.published_architectures()
  assert names == sorted(TABLE)
  for name in names:
    assert gen_timm_architectures.describe(name) == TABLE[name], name
  defaults = gen_timm_architectures.describe_defaults()
  assert defaults == {'vit': timm_architectures.VIT_DEFAULTS,
                      'swin': timm_architectures.SWIN_DEFAULTS,
                      'eva': timm_architectures.EVA_DEFAULTS}


def test_file_is_what_the_generator_writes():
  """The JSON file reads back to entries the generator writes byte for byte (tuples included)."""
  path = os.path.join(os.path.dirname(timm_architectures.__file__), 'architectures.json')
  with open(path, encoding='utf-8') as f:
    text = f.read()
  defaults = {'vit': timm_architectures.VIT_DEFAULTS, 'swin': timm_architectures.SWIN_DEFAULTS,
              'eva': timm_architectures.EVA_DEFAULTS}
  assert gen_timm_architectures.table_text(TABLE, defaults) == text
  assert isinstance(TABLE['swin_tiny_patch4_window7_224']['depths'], tuple)


def test_named_architectures_are_what_timm_says():
  """The two guessed wrong before: read from the table, not the name."""
  so150m, siglip2 = (TABLE[n] for n in NAMED)
  assert (so150m['embed_dim'], so150m['num_heads'], so150m['act_layer']) == (896, 14, 'gelu')
  assert (siglip2['num_heads'], siglip2['act_layer']) == (16, 'gelu_tanh')
  assert set(NAMED) <= set(representatives())


def hub_folder(name, directory):
  """timm's `name` with one block per stage at a small image, noised, saved as the hub does."""
  entry = TABLE[name]
  if entry['family'] == 'swin':
    size = entry['window_size'][0] * 32
    kwargs = dict(depths=(1,) * len(entry['depths']), img_size=size)
  else:
    size = 2 * entry['patch_size']
    kwargs = dict(depth=1, img_size=size)
  if entry['family'] == 'eva' and entry['block'] == 'EvaBlock':  # Sapiens2: kv heads per block.
    kwargs['num_kv_heads'] = entry['num_kv_heads']
  torch.manual_seed(0)
  net = timm.create_model(name, pretrained=False, **kwargs)
  with torch.no_grad():
    for p in net.parameters():
      p.add_(0.2 * torch.randn_like(p))
  save_for_hf(net.eval(), str(directory), safe_serialization=True)
  path = os.path.join(directory, 'config.json')
  with open(path) as f:
    config = json.load(f)
  del config['model_args']  # The hub's config.json has none: the architecture name says it.
  config['pretrained_cfg']['input_size'] = [3, size, size]  # As published at this size.
  with open(path, 'w') as f:
    json.dump(config, f)
  return net, size


@pytest.mark.parametrize('name', representatives())
def test_hub_folder_as_published(name, tmp_path):
  net, size = hub_folder(name, tmp_path)
  x = np.random.default_rng(1).normal(size=(2, size, size, 3)).astype(np.float32)
  try:
    loaded = loading.load_model(str(tmp_path))
  except CheckpointError as e:
    assert '\n' not in str(e) and name in str(e), str(e)
    return
  with torch.no_grad():
    want = net(torch.from_numpy(x.transpose(0, 3, 1, 2).copy())).numpy()
  model = models.get_model(loaded.config, num_classes=loaded.num_classes)
  got = jax.jit(lambda p, v: model.apply({'params': p}, v, train=False))(
      loaded.params, jnp.asarray(x))
  assert np.abs(np.asarray(got) - want).max() < 2e-5 * max(1., np.abs(want).max()), name
  if TABLE[name]['family'] in ('vit', 'eva'):
    check_export(name, loaded, x, want, tmp_path / 'export')


def check_export(name, loaded, x, want, directory):
  """export_timm writes the architecture and only what differs from timm's definition of it
  (here what the test changed); timm rebuilds the same model from them."""
  timm_export.export(loaded.params, loaded.config.to_dict(), str(directory),
                     num_classes=loaded.num_classes, image_size=x.shape[1])
  with open(directory / 'config.json') as f:
    config = json.load(f)
  changed = {'num_classes', 'depth', 'img_size'} | (
      set() if TABLE[name]['qkv_bias'] else {'qkv_bias'})  # Written as zeros.
  assert config['architecture'] == name and set(config['model_args']) <= changed, config
  net = timm.create_model(name, pretrained=False, **config['model_args']).eval()
  net.load_state_dict({k: torch.from_numpy(v) for k, v in
                       load_file(str(directory / 'model.safetensors')).items()})
  with torch.no_grad():
    back = net(torch.from_numpy(x.transpose(0, 3, 1, 2).copy())).numpy()
  assert np.abs(back - want).max() < 2e-5 * max(1., np.abs(want).max()), name


def test_unknown_architecture_without_model_args_is_one_line():
  """Not in the table and no model_args: one line naming it and what to state, no guess."""
  width = 64
  state = {'patch_embed.proj.weight': np.zeros((width, 3, 16, 16), np.float32)}
  with pytest.raises(timm_vit.TimmFormatError) as e:
    timm_vit.convert_vit(state, {'architecture': 'vit_future_patch16_224'})
  message = str(e.value)
  assert 'vit_future_patch16_224' in message and '"model_args"' in message
  assert 'num_heads' in message and 'act_layer' in message and '\n' not in message
  declared, assumed = timm_declared.declared_architecture(
      {'architecture': 'vit_future_patch16_224',
       'model_args': {'num_heads': 2, 'act_layer': 'gelu_tanh'}}, width)
  assert (declared['num_heads'], declared['act_layer']) == (2, 'gelu_tanh')
  assert any('vit_future_patch16_224' in a for a in assumed)


def test_weights_of_another_width_are_refused_in_one_line():
  """The table's heads belong to the architecture's width: other weights must say theirs."""
  state = {'patch_embed.proj.weight': np.zeros((32, 3, 16, 16), np.float32)}
  with pytest.raises(timm_vit.TimmFormatError) as e:
    timm_vit.convert_vit(state, {'architecture': 'vit_small_patch16_224'})
  assert '32 wide' in str(e.value) and '384 wide' in str(e.value) and '\n' not in str(e.value)
