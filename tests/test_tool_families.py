"""Every tool on every registered model family's bare .npz: it works, or refuses in one line.

The matrix: predict, features, analyze, flops and export_timm × every family of the registry
(`families.FAMILIES`), each on a bare published-format .npz (no description: the shapes say
what it is). tests/test_conformance.py runs the same tools on each family's run directory
(params.npz + metadata.json). The models are each family's smallest preset at its runlocal
size (`test_conformance.small_preset`), built once per module; what a tool refuses follows from
the family's record and module, never from its name.
"""

import json
import os
import types
from typing import Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from PIL import Image

from vit_jax import checkpoint
from vit_jax import config_lib
from vit_jax import families
from vit_jax import models
from vit_jax import models_vit
from vit_jax.weights import loading
from vit_jax.data import image_ops
from vit_jax.tools import analyze
from vit_jax.tools import cli
from vit_jax.tools import export_timm
from vit_jax.tools import features
from vit_jax.tools import flops
from vit_jax.tools import predict
from vit_jax.training import export
from vit_jax.training import settings

from test_conformance import small_preset

CLASSES = ('cat', 'dog')
FAMILIES = tuple(families.FAMILIES)


def model_config(family: str) -> ml_collections.ConfigDict:
  """The run config of `family`'s smallest preset at its runlocal size (a 2x2 token grid)."""
  config = config_lib.with_model(config_lib.get_config(), small_preset(family))
  config_lib.shrink(config)
  return config


def write_run(workdir: str, family: str) -> None:
  """A run directory as the trainer exports it (`training.export.export_params`)."""
  config = model_config(family)
  config.dataset = 'folder'
  side = config.pp.crop
  net = models.get_model(config.model, num_classes=len(CLASSES))
  shapes = jax.eval_shape(lambda: net.init(jax.random.key(0), jnp.zeros(
      (1, side, side, 3)), train=False))['params']
  rng = np.random.default_rng(0)  # Random weights without compiling an init: seconds.
  params = jax.tree.map(
      lambda s: (0.3 * rng.standard_normal(s.shape) + (1 if len(s.shape) == 1 else 0)
                 ).astype(np.float32), shapes)
  trainer = types.SimpleNamespace(run=settings.read(config), total_steps=1,
                                  info=types.SimpleNamespace(class_names=CLASSES))
  export.export_params(trainer, params, workdir,
                       {'accuracy': 0.5, 'num_examples': 2})


@pytest.fixture(scope='module')
def sources(tmp_path_factory):
  """{family: {'run': run directory, 'npz': bare .npz}} plus 'image': one PNG."""
  root = tmp_path_factory.mktemp('families')
  out = {'image': str(root / 'image.png')}
  pixels = np.random.default_rng(0).integers(0, 256, (40, 36, 3), dtype=np.uint8)
  Image.fromarray(pixels).save(out['image'])
  for family in FAMILIES:
    workdir = str(root / family)
    write_run(workdir, family)
    bare = str(root / f'{family}_bare.npz')
    checkpoint.save(checkpoint.load(os.path.join(workdir, 'params.npz')), bare)
    out[family] = {'run': workdir, 'npz': bare}
  return out


def refusal(tool: str, family: str) -> Optional[str]:
  """The words of `tool`'s one-line refusal of `family`, from its record and module, or None."""
  record = families.FAMILIES[family]
  if tool in ('features', 'analyze'):
    vit = issubclass(models.module_of(family), models_vit.VisionTransformer)
    return None if vit else 'Features need a Vision Transformer'
  if tool == 'flops':
    return None if record.flops else f'is a {record.title} model'
  if tool == 'export_timm' and record.timm_writer:  # Its own writer: timm's names for it.
    return 'exported under its timm architecture'
  if tool == 'export_timm':
    return (f'(a {record.title})' if not record.timm_vit else
            'a ResNet stem' if record.resnet_root else None)
  return None


def _call(tool, args, capsys):
  rc = cli.call(tool, [tool.__name__.rsplit('.', 1)[-1], *args])
  out, err = capsys.readouterr()
  return rc, out, err


def _run_tool(name, source, sources, tmp_path, capsys):
  """(exit status, stdout, stderr) of tool `name` on checkpoint `source`."""
  image = sources['image']
  if name == 'predict':
    return _call(predict, [f'--checkpoint={source}', image], capsys)
  if name == 'analyze':
    return _call(analyze, [f'--checkpoint={source}', f'--out={tmp_path / "analysis"}', image],
                 capsys)
  if name == 'flops':
    return _call(flops, [f'--checkpoint={source}'], capsys)
  if name == 'export_timm':
    return _call(export_timm, [f'--checkpoint={source}', f'--out={tmp_path / "timm"}'], capsys)
  loaded = loading.load_model(source)  # features: a library call, no CLI.
  try:
    result = features.extract_features(loaded.model, loaded.params,
                                       image_ops.load_images([image], loaded.image_size))
  except ValueError as e:
    return 1, '', f'features: error: {e}\n'
  return 0, str(result.pre_logits.shape), ''


@pytest.mark.parametrize('family', FAMILIES)
@pytest.mark.parametrize('tool', ['predict', 'features', 'analyze', 'flops', 'export_timm'])
def test_tool_works_on_the_family_or_refuses_in_one_line(tool, family, sources, tmp_path,
                                                         capsys):
  rc, out, err = _run_tool(tool, sources[family]['npz'], sources, tmp_path, capsys)
  refused = refusal(tool, family)
  if refused:
    assert rc == 1 and not out, (out, err)
    assert err.startswith(f'{tool}: error:') and refused in err, err
    assert err.count('\n') == 1 and 'Traceback' not in err, err
    return
  assert rc == 0, err
  if tool == 'predict':
    labels = [line.split('%', 1)[1].strip() for line in out.splitlines()[1:]]
    assert sorted(labels) == ['class 0', 'class 1']  # No description: no class names.
  elif tool == 'analyze':
    assert os.path.isfile(tmp_path / 'analysis' / 'analysis.json')
  elif tool == 'flops':  # The checkpoint's model, size and classes, not --model's ViT-B/16.
    loaded = loading.load_model(sources[family]['npz'])
    side = loaded.image_size
    assert out.startswith(f'{loaded.config.model_name} at {side}x{side}, 2 classes'), out
  elif tool == 'export_timm':
    assert os.path.isfile(tmp_path / 'timm' / 'model.safetensors')
    with open(tmp_path / 'timm' / 'config.json') as f:
      written = json.load(f)
    assert written.get('label_names') is None


def test_export_timm_writes_the_runs_class_names_where_timm_reads_them(sources, tmp_path, capsys):
  import timm
  out = tmp_path / 'timm'
  rc, _, err = _call(export_timm, [f'--checkpoint={sources["vit"]["run"]}', f'--out={out}'],
                     capsys)
  assert rc == 0, err
  model = timm.create_model(f'local-dir:{out}', pretrained=True)
  assert model.pretrained_cfg['label_names'] == list(CLASSES)
