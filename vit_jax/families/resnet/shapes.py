"""How a ResNet checkpoint is read from its parameter shapes; `root_fields` also reads a
hybrid's root (`families/vit/shapes.py`)."""

from typing import Any, Dict, Mapping, Optional, Tuple

from vit_jax import presets
from vit_jax.families.resnet.presets import UNITS, unit_field
from vit_jax.weights import shape_readers
from vit_jax.weights.shape_readers import Match


def root_fields(tree: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
  """Units per stage and width factor of a ResNet root (`conv_root` + `block<s>/unit<u>`),
  a hybrid's or a ResNet classifier's; None without one."""
  if 'conv_root' not in tree:
    return None
  width = tree['conv_root']['kernel'][3]
  stages = shape_readers.count(tree, r'block\d+')
  units = tuple(shape_readers.count(tree[f'block{s + 1}'], r'unit\d+') for s in range(stages))
  factor = width / 64
  return dict(num_layers=units, width_factor=int(factor) if factor == int(factor) else factor)


def _unit(tree: Mapping[str, Any]) -> str:
  """A bottleneck unit has a third conv (its 1x1 expansion); a basic unit (ResNet-18) two."""
  return UNITS[0] if 'conv3' in tree['block1']['unit1'] else 'basic'


def _resnet_classifier_fields(tree: Mapping[str, Any]) -> Dict[str, Any]:
  """Stage sizes, width, root kernel and unit of a ResNet classifier (`models_resnet.ResNet`)."""
  stem = root_fields(tree)  # The same root and units as a hybrid's stem.
  return dict(family='resnet', stage_sizes=stem['num_layers'], width_factor=stem['width_factor'],
              root_kernel=tree['conv_root']['kernel'][0], **unit_field(_unit(tree)))


def _complete(config: Mapping[str, Any]) -> Dict[str, Any]:
  """A ResNet config written before `unit` existed (run metadata up to 2026-12-01) is a
  bottleneck ResNet."""
  return {'unit': UNITS[0], **shape_readers.plain_config(config)}


def _resnet_config(fields: Dict[str, Any], name: Optional[str]) -> Tuple[Dict[str, Any], list]:
  """Completes a ResNet's shape-decided fields with the preset's root stride and pooling."""
  if name:
    preset = presets.MODEL_CONFIGS[name]
    return dict(fields, root_stride=preset.root_stride, root_pool=preset.root_pool), []
  stride = 2 if fields['root_kernel'] == 7 else 1
  config = dict(fields, root_stride=stride, root_pool=True)
  return config, [f'root stride {stride} and a max-pool after the root (shapes cannot tell)']


def _resnet_compared(config: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
  return (('ResNet unit', config['unit']),
          ('ResNet units per stage', tuple(config['stage_sizes'])),
          ('ResNet width factor', config['width_factor']), ('root kernel', config['root_kernel']))


def _resnet_name(fields: Mapping[str, Any]) -> str:
  sizes = '-'.join(map(str, fields['stage_sizes']))
  unit = f'-{fields["unit"]}' if 'unit' in fields else ''
  return f'ResNet-custom{unit}-{sizes}-w{fields["width_factor"]:g}-root{fields["root_kernel"]}'


def _read_resnet(tree: Mapping[str, Any], match: Match) -> Tuple[Dict[str, Any], Any, list]:
  fields = _resnet_classifier_fields(tree)
  config, assumed = _resnet_config(fields, match(fields))
  return config, None, assumed


READER = shape_readers.ShapeReader('conv_root/ without embedding/',
                            lambda t: 'conv_root' in t and 'embedding' not in t, _read_resnet,
                            _resnet_compared, _resnet_name, complete=_complete)
