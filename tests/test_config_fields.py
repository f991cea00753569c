"""One source of truth for config fields: the library reads what the configs declare, and only that.

Reads are found statically (every `config.a.b` attribute chain in `vit_jax/`), so a field read on
a rarely taken branch counts too. Declared fields are those of the base config and of every
experiment file in `configs/`. Model fields (`config.model.*`) are the model's constructor
arguments, checked by the model tests, and are left out here.
"""

import ast
import glob
import os
import re

import ml_collections
import pytest

from test_configs import CONFIG_FILES, load_config
from vit_jax import config_lib
from vit_jax import presets

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VIT_JAX = os.path.join(ROOT, 'vit_jax')
# ConfigDict methods: `config.pp.get_ref(...)` is a call, not a field.
METHODS = {'get', 'update', 'lock', 'unlock', 'to_dict', 'to_json', 'items', 'keys', 'values',
           'copy_and_resolve_references', 'get_ref', 'ignore_type', 'unlocked'}
# Model ConfigDicts are also often called `config` (presets, tools); their fields are not
# experiment fields.
MODEL_FIELDS = {key for preset in presets.MODEL_CONFIGS.values() for key in preset} | set(
    presets.VIT_EXTRAS)
# Sub-configs that are whole experiment configs of their own (the two-stage trainer's stages).
STAGES = ('pretrain', 'finetune')


def config_chain(node: ast.Attribute):
  """'pp.crop' for `config.pp.crop` (also `trainer.config.pp.crop`), else None."""
  parts = []
  while isinstance(node, ast.Attribute):
    if node.attr == 'config' and parts:
      break
    parts.append(node.attr)
    node = node.value
  rooted = (isinstance(node, ast.Name) and node.id == 'config') or (
      isinstance(node, ast.Attribute) and node.attr == 'config'
      and not (isinstance(node.value, ast.Name) and node.value.id == 'tf'))
  if not rooted or not parts:
    return None
  parts.reverse()
  while parts and parts[-1] in METHODS:
    parts.pop()
  return '.'.join(parts) or None


def library_reads():
  """{field path: first 'file:line' reading it} over the package's modules."""
  reads = {}
  for path in sorted(glob.glob(os.path.join(ROOT, 'vit_jax', '**', '*.py'), recursive=True)):
    with open(path) as f:
      tree = ast.parse(f.read())
    outer = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
      if isinstance(node, ast.Attribute) and id(node) not in outer:
        chain = config_chain(node)
        if chain and chain.startswith('model.'):
          chain = 'model'  # The model's own fields are its constructor's business.
        if chain:
          reads.setdefault(chain, f'{os.path.basename(path)}:{node.lineno}')
  return reads


def flatten(config, prefix=''):
  """Leaf field paths of `config`; stage sub-configs are flattened as configs of their own."""
  fields = set()
  for key, value in config.items():
    name = f'{prefix}{key}'
    if key == 'model' and not prefix:
      fields.add(name)
    elif key in STAGES and not prefix and isinstance(value, ml_collections.ConfigDict):
      fields |= {name} | flatten(value)
    elif isinstance(value, ml_collections.ConfigDict):
      fields |= flatten(value, f'{name}.')
    else:
      fields.add(name)
  return fields


def declared_fields():
  fields = flatten(config_lib.get_config())
  for path in CONFIG_FILES:
    fields |= flatten(load_config(path)[1])
  return fields


def is_covered(field, paths):
  """`field` or one of its parents (a sub-config read whole) is in `paths`."""
  parts = field.split('.')
  return any('.'.join(parts[:i]) in paths for i in range(1, len(parts) + 1))


def test_the_library_reads_only_declared_fields():
  declared = declared_fields()
  undeclared = {field: where for field, where in library_reads().items()
                if field not in declared and field.split('.')[0] not in MODEL_FIELDS
                and not any(d.startswith(field + '.') for d in declared)}
  assert not undeclared, f'read but declared by no config: {undeclared}'


def test_every_declared_field_is_read():
  reads = set(library_reads())
  never_read = sorted(f for f in declared_fields() if not is_covered(f, reads))
  assert not never_read, f'declared but never read by vit_jax/: {never_read}'


def test_no_config_get_with_a_default_in_the_library():
  """`config.get('x', default)` would write a second default; read `config.x` instead."""
  hits = []
  for path in sorted(glob.glob(os.path.join(ROOT, 'vit_jax', '**', '*.py'), recursive=True)):
    with open(path) as f:
      for node in ast.walk(ast.parse(f.read())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == 'get' and _is_config(node.func.value)
            and not _reads_model_field(node)):
          hits.append(f'{os.path.basename(path)}:{node.lineno}')
  assert not hits, f'config.get(...) in the library: {hits}'


def _reads_model_field(call):
  key = call.args[0] if call.args else None
  return isinstance(key, ast.Constant) and key.value in MODEL_FIELDS


def _is_config(node):
  return (isinstance(node, ast.Name) and node.id == 'config') or (
      isinstance(node, ast.Attribute) and config_chain(node) is not None
      and not config_chain(node).startswith('model'))


@pytest.mark.parametrize('source, want', [
    ('config.pp.crop', 'pp.crop'), ('trainer.config.batch', 'batch'),
    ('config.pp.randaug.num_layers', 'pp.randaug.num_layers'), ('x.pp.crop', None),
    ('config.pp.update', 'pp'), ('tf.config.set_visible_devices', None)])
def test_config_chain(source, want):
  assert config_chain(ast.parse(source, mode='eval').body) == want


def _field(config, dotted):
  for part in dotted.split('.'):
    config = config[part]
  return config


@pytest.mark.parametrize('field', sorted(config_lib.CHOICES))
def test_each_choice_field_is_declared_with_a_valid_default_and_checked_where_used(field):
  """CHOICES names declared fields; the default is a choice; the library checks the field."""
  choices = config_lib.CHOICES[field]
  assert _field(config_lib.get_config(), field) in choices
  library = ''.join(open(p).read() for p in glob.glob(os.path.join(VIT_JAX, '**', '*.py'),
                                                          recursive=True))
  assert f"check_choice('{field}'" in library
  with pytest.raises(ValueError, match=rf'Unknown {re.escape(field)}=.nope.; use one of '
                                       rf'{re.escape(", ".join(choices))}'):
    config_lib.check_choice(field, 'nope')


def test_the_trainers_main_runs_are_the_trainer_choices():
  from vit_jax import main  # noqa: PLC0415  # main defines flags at import.
  assert tuple(main.TRAINERS) == config_lib.CHOICES['trainer']
