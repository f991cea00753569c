"""A made-up model family, added by this one folder: the conformance suite's outsider.

Toy: one strided convolution (its patch embedding), global average pooling and a head. It has
the pieces a record names (module, shape reader, FLOPs counter) and a preset; what it lacks
(token features, timm export, masked pretraining) the package refuses in one line.
`register(monkeypatch)` is its registry line.
"""

from typing import Any, Dict, Tuple

import flax.linen as nn
import jax.numpy as jnp
import ml_collections

from vit_jax import families
from vit_jax import presets
from vit_jax.weights import shape_readers
from vit_jax.families.flops import FlopsCounter


class ToyNet(nn.Module):
  """A patch convolution, mean-pooled, then a zero-initialised head (none for num_classes=0)."""
  num_classes: int
  patches: Any
  width: int
  family: str = 'toy'
  model_name: str = ''

  @nn.compact
  def __call__(self, x: jnp.ndarray, *, train: bool) -> jnp.ndarray:
    del train  # No dropout.
    size = tuple(self.patches['size'])
    x = nn.Conv(self.width, size, strides=size, padding='VALID', name='toy_stem')(x)
    x = nn.LayerNorm(name='toy_norm')(x.mean((1, 2)))
    if not self.num_classes:
      return x
    return nn.Dense(self.num_classes, kernel_init=nn.initializers.zeros, name='head')(x)


def _read(tree: Dict[str, Any], match: Any) -> Tuple[Dict[str, Any], Any, list]:
  kernel = tree['toy_stem']['kernel']
  return dict(family='toy', patches={'size': tuple(kernel[:2])}, width=kernel[3]), None, []


READER = shape_readers.ShapeReader(
    'toy_stem/', lambda tree: 'toy_stem' in tree, _read,
    lambda c: (('patch size', tuple(c['patches']['size'])), ('width', c['width'])),
    lambda c: f'Toy-custom-{c["width"]}d-p{c["patches"]["size"][0]}')


def _count(config: Any, side: int, classes: int) -> Dict[str, int]:
  patch, width = config['patches']['size'][0], config['width']
  grid = side // patch
  out = dict(patch_embedding=2 * grid * grid * patch * patch * 3 * width,
             head=2 * width * (classes or 0))
  return dict(out, total=sum(out.values()))


def _doubled(config: Any, change: str) -> None:
  if change == 'hidden size':
    config.width *= 2


FLOPS = FlopsCounter(_count, _doubled, lambda c, side: (side // c.patches.size[0])**2)


def _shrink(model: ml_collections.ConfigDict) -> None:
  model.width = 8


def _stride(config: Any) -> int:
  return config['patches']['size'][0]


PRESETS = (ml_collections.ConfigDict(dict(
    model_name='Toy-S_4', family='toy', patches={'size': (4, 4)}, width=64)),)

FAMILY = families.Family(
    'toy', 'Toy', {}, False, token_stride=_stride,
    token_grid=lambda c, hw: (hw[0] // _stride(c), hw[1] // _stride(c)),
    finetune_resolution=lambda c, target: -(-target // _stride(c)) * _stride(c),
    input_multiple=_stride, shrink=_shrink, module=f'{__name__}.ToyNet',
    shape_reader=f'{__name__}.READER', flops=f'{__name__}.FLOPS', presets=PRESETS)


def register(monkeypatch: Any) -> None:
  """For one test, what a real family's registry line does: the record in `FAMILIES`, its
  presets in `MODEL_CONFIGS` (registered there when `presets` is imported)."""
  monkeypatch.setitem(families.FAMILIES, FAMILY.name, FAMILY)
  for config in FAMILY.presets:
    monkeypatch.setitem(presets.MODEL_CONFIGS, config.model_name,
                        config.copy_and_resolve_references().lock())
