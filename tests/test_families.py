"""A model family is one record (`families.FAMILIES`) and every per-family call site reads it."""

import os
import pathlib
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import pytest

from vit_jax import config_lib
from vit_jax import families
from vit_jax import models
from vit_jax import presets
from vit_jax.weights import architecture
from vit_jax.weights import shape_readers
from vit_jax.weights.npz_format import CheckpointError
from vit_jax.families.flops import FlopsCounter
from vit_jax.tools import flops

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / 'vit_jax'


def _preset_of(family):
  return next(name for name, config in presets.MODEL_CONFIGS.items() if config.family == family)


def _shapes(model, side):
  images = jax.ShapeDtypeStruct((1, side, side, 3), jnp.float32)
  return jax.eval_shape(lambda x: model.init(jax.random.key(0), x, train=False), images)['params']


@pytest.mark.parametrize('family', list(families.FAMILIES))
def test_each_family_record_has_every_piece_in_its_layer(family):
  record = families.FAMILIES[family]
  module = families.resolve(record.module)
  assert issubclass(module, nn.Module)
  # Every piece a record names lives in a family's folder (a hybrid's are the ViT's).
  for piece in (record.module, record.shape_reader, *filter(None, [record.flops])):
    assert piece.startswith('vit_jax.families.') and piece.count('.') == 4, piece
  reader = families.resolve(record.shape_reader)
  assert isinstance(reader, shape_readers.ShapeReader)
  if record.flops is not None:
    assert isinstance(families.resolve(record.flops), FlopsCounter)
  config = config_lib.get_config()
  config_lib.with_model(config, _preset_of(family))
  assert set(record.extras) <= set(config.model)
  config_lib.shrink(config)  # The runlocal size, built, and read back from its shapes.
  side = config.pp.crop
  assert presets.token_grid(config.model, (side, side)) == (2, 2)
  assert side % record.input_multiple(config.model) == 0  # The runlocal crop is accepted.
  arch = architecture.architecture(_shapes(models.get_model(config.model, num_classes=3), side))
  assert arch.config.family == family and arch.num_classes == 3
  assert architecture.first_difference(arch.config, config.model, 'the config') is None


class ToyNet(nn.Module):
  """A made-up family: one strided conv and a head."""
  num_classes: int
  patches: ml_collections.ConfigDict
  width: int
  family: str = 'toy'
  model_name: str = ''

  @nn.compact
  def __call__(self, x, *, train: bool):
    size = tuple(self.patches['size'])
    x = nn.Conv(self.width, size, strides=size, name='toy_stem')(x)
    return nn.Dense(self.num_classes, name='head')(x.mean((1, 2)))


def _read_toy(tree, match):
  kernel = tree['toy_stem']['kernel']
  return dict(family='toy', patches={'size': tuple(kernel[:2])}, width=kernel[3]), None, []


TOY_READER = shape_readers.ShapeReader(
    'toy_stem/', lambda t: 'toy_stem' in t, _read_toy, lambda c: (('width', c['width']),),
    lambda c: f'Toy-{c["width"]}')
TOY_FLOPS = FlopsCounter(
    count=lambda c, side, classes: {'total': 2 * side * side * 3 * c['width'] + classes},
    doubled=lambda c, change: None, tokens=lambda c, side: 1)


def _shrink_toy(model):
  model.width = 4


@pytest.fixture
def toy_family(monkeypatch):
  record = families.Family(
      'toy', 'Toy', {'dtype': 'float32'}, False, token_stride=lambda c: c['patches']['size'][0],
      token_grid=lambda c, hw: (hw[0] // 4, hw[1] // 4), finetune_resolution=lambda c, t: 64,
      input_multiple=lambda c: 4, shrink=_shrink_toy, module=f'{__name__}.ToyNet',
      shape_reader=f'{__name__}.TOY_READER', flops=f'{__name__}.TOY_FLOPS')
  monkeypatch.setitem(families.FAMILIES, 'toy', record)
  return ml_collections.ConfigDict(dict(model_name='toy', family='toy',
                                        patches={'size': (4, 4)}, width=8))


def test_a_new_family_record_is_picked_up_by_every_call_site(toy_family):
  config = toy_family
  assert presets.family_of(config) == 'toy'
  assert presets.token_stride(config) == 4 and presets.finetune_resolution(config) == 64
  assert presets.token_grid(config, (32, 32)) == (8, 8) and presets.num_prefix_tokens(config) == 0
  model = models.get_model(config, num_classes=5)
  assert isinstance(model, ToyNet)
  arch = architecture.architecture(_shapes(model, 32))
  assert (arch.config.family, arch.model_name, arch.num_classes) == ('toy', 'Toy-8', 5)
  with pytest.raises(CheckpointError, match=r'ResNet, EVA or Toy checkpoint: .*toy_stem/'):
    architecture.architecture({'nothing': jnp.zeros(1)})
  assert flops.count_flops(config, 32, 5)['total'] == 2 * 32 * 32 * 3 * 8 + 5
  run = config_lib.get_config()
  run.model = ml_collections.ConfigDict(config.to_dict())
  config_lib.shrink(run)
  assert run.model.width == 4 and run.pp.crop == 8


def test_a_family_without_a_counter_is_one_line_from_flops():
  with pytest.raises(ValueError, match=r'Mixer-B_16 is a Mixer model, which it does not count'):
    flops.count_flops(models.get_config('Mixer-B_16'), 224)


def _comparisons(name):
  """A family's name compared: `== 'swin'`, `'swin' !=`, `in ('vit', 'hybrid')`."""
  quoted = f'[\'"]{name}[\'"]'
  return re.compile(rf'(==|!=)\s*{quoted}|{quoted}\s*(==|!=)|\bin\s*[(\[{{][^)\]}}]*{quoted}')


def test_no_family_name_is_compared_outside_its_own_files():
  """Generic code asks the family's record; only a family's own folder (families/swin/) says
  its name."""
  found = []
  for path in sorted(PACKAGE.rglob('*.py')):
    folder = path.relative_to(PACKAGE).parts[:2]
    for n, line in enumerate(path.read_text().splitlines(), 1):
      code = line.split('#')[0]
      if any(folder != ('families', name) and _comparisons(name).search(code)
             for name in families.FAMILIES):
        found.append(f'{path.relative_to(PACKAGE.parent)}:{n}: {line.strip()}')
  assert not found, 'ask the family record instead:\n' + '\n'.join(found)


@pytest.mark.parametrize('preset,family', [('R50+ViT-B_16', 'vit'), ('ViT-B_16', 'hybrid')])
def test_a_family_that_contradicts_the_resnet_root_is_one_line(preset, family):
  """The model builds a ResNet root iff `resnet` is set; the token geometry reads `family`. A
  config where they disagree (a hybrid declared 'vit') would train with one grid and count
  another: refused where every path asks for the family."""
  model = presets.MODEL_CONFIGS[preset].copy_and_resolve_references()
  model.unlock().family = family
  with pytest.raises(ValueError, match=f"declares family='{family}' but .* set family='"):
    presets.family_of(model)
  config = config_lib.finetune_config(preset, 'cifar10')
  config.model.family = family
  with pytest.raises(ValueError, match='so the model and its token geometry agree'):
    presets.record_of(config.model)


def test_published_weights_are_declared_once_and_catalogued():
  """Each family's published weights (`Weights`: source, size, head, mean/std) are what
  checkpoints/README.md catalogues, folder by folder; each names a preset whose grid its size
  fills, and each name resolves to its source (`store.locate`, the download path)."""
  from vit_jax.weights import store
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  with open(os.path.join(root, 'checkpoints', 'README.md')) as f:
    rows = [line.split('|')[1:4] for line in f if line.startswith('| `gs://')]
  catalogued = {re.search(r'`(\S+)`', folder)[1]: set(re.findall(r'`([^`.]+)`', files)) - {'.npz'}
                for folder, _, files in rows}
  declared = {}
  for weights in presets.PUBLISHED_WEIGHTS.values():
    folder, stem = weights.source.rsplit('/', 1)
    declared.setdefault(folder, set()).add(stem[:-len('.npz')])
    assert store.locate(weights.name).path == weights.source
    config = presets.MODEL_CONFIGS[weights.preset]
    assert weights.image_size % presets.token_stride(config) == 0, weights.name
  catalogued.pop('gs://vit_models/augreg')  # Its files are listed by its own index.csv.
  assert declared == catalogued
