"""Every tool on every model family: it works, or refuses in one line (no traceback).

The matrix: predict, features, analyze, flops and export_timm × ViT, hybrid, Mixer, Swin and
ResNet, each on a run directory (params.npz + metadata.json, written by the trainer's own
export) and on a bare published-format .npz (no description: the shapes say what it is). The
models are the tiny presets at 32px, built once per module.
"""

import json
import os
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from PIL import Image

from vit_jax import checkpoint
from vit_jax import config_lib
from vit_jax import models
from vit_jax.weights import loading
from vit_jax.data import image_ops
from vit_jax.tools import analyze
from vit_jax.tools import cli
from vit_jax.tools import export_timm
from vit_jax.tools import features
from vit_jax.tools import flops
from vit_jax.tools import predict
from vit_jax.training import export

CLASSES = ('cat', 'dog')
IMAGE_SIZE = 32


def model_config(family: str) -> ml_collections.ConfigDict:
  """A tiny model of `family` that runs at 32px in a second."""
  if family == 'vit':
    return config_lib.with_model(config_lib.get_config(), 'testing').model
  if family == 'hybrid':  # Root only (32 → 8), then 2x2 patches: a 4x4 grid.
    return config_lib.small_vit('hybrid-testing', patch=2, hidden=8, layers=1, mlp=8, heads=2,
                                resnet_layers=())
  if family == 'mixer':
    return ml_collections.ConfigDict(dict(
        model_name='mixer-testing', family='mixer', patches=dict(size=(8, 8)), hidden_dim=8,
        num_blocks=1,
        tokens_mlp_dim=8, channels_mlp_dim=8))
  if family == 'swin':
    return config_lib.with_model(config_lib.get_config(), 'Swin-testing').model
  return config_lib.with_model(config_lib.get_config(), 'ResNet-11_28px').model


def write_run(workdir: str, family: str) -> None:
  """A run directory as the trainer exports it (`training.export.export_params`)."""
  config = config_lib.get_config()
  config.model = model_config(family)
  config.pp.crop = IMAGE_SIZE
  config.dataset = 'folder'
  net = models.get_model(config.model, num_classes=len(CLASSES))
  shapes = jax.eval_shape(lambda: net.init(jax.random.key(0), jnp.zeros(
      (1, IMAGE_SIZE, IMAGE_SIZE, 3)), train=False))['params']
  rng = np.random.default_rng(0)  # Random weights without compiling an init: seconds.
  params = jax.tree.map(
      lambda s: (0.3 * rng.standard_normal(s.shape) + (1 if len(s.shape) == 1 else 0)
                 ).astype(np.float32), shapes)
  trainer = types.SimpleNamespace(config=config, total_steps=1,
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


FAMILIES = ('vit', 'hybrid', 'mixer', 'swin', 'resnet')
# What each tool does not apply to, and the words of its one-line refusal.
REFUSED = {
    'features': {f: 'Features need a Vision Transformer' for f in ('mixer', 'swin', 'resnet')},
    'analyze': {f: 'Features need a Vision Transformer' for f in ('mixer', 'swin', 'resnet')},
    'flops': {'mixer': 'is a Mixer model', 'resnet': 'is a ResNet model'},
    'export_timm': {'hybrid': 'a ResNet stem', 'mixer': '(a Mixer)', 'swin': '(a Swin)',
                    'resnet': '(a ResNet)'},
}


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


@pytest.mark.parametrize('kind', ['run', 'npz'])
@pytest.mark.parametrize('family', FAMILIES)
@pytest.mark.parametrize('tool', ['predict', 'features', 'analyze', 'flops', 'export_timm'])
def test_tool_works_on_the_family_or_refuses_in_one_line(tool, family, kind, sources, tmp_path,
                                                         capsys):
  rc, out, err = _run_tool(tool, sources[family][kind], sources, tmp_path, capsys)
  refusal = REFUSED.get(tool, {}).get(family)
  if refusal:
    assert rc == 1 and not out, (out, err)
    assert err.startswith(f'{tool}: error:') and refusal in err, err
    assert err.count('\n') == 1 and 'Traceback' not in err, err
    return
  assert rc == 0, err
  if tool == 'predict':
    labels = [line.split('%', 1)[1].strip() for line in out.splitlines()[1:]]
    assert sorted(labels) == (list(CLASSES) if kind == 'run' else ['class 0', 'class 1'])
  elif tool == 'analyze':
    assert os.path.isfile(tmp_path / 'analysis' / 'analysis.json')
  elif tool == 'flops':  # The checkpoint's model, size and classes, not --model's ViT-B/16.
    name = loading.load_model(sources[family][kind]).config.model_name
    assert out.startswith(f'{name} at 32x32, 2 classes'), out
    assert name == model_config(family).model_name or kind == 'npz'
  elif tool == 'export_timm':
    assert os.path.isfile(tmp_path / 'timm' / 'model.safetensors')
    with open(tmp_path / 'timm' / 'config.json') as f:
      written = json.load(f)
    assert written.get('label_names') == (list(CLASSES) if kind == 'run' else None)


def test_export_timm_writes_the_runs_class_names_where_timm_reads_them(sources, tmp_path, capsys):
  import timm
  out = tmp_path / 'timm'
  rc, _, err = _call(export_timm, [f'--checkpoint={sources["vit"]["run"]}', f'--out={out}'],
                     capsys)
  assert rc == 0, err
  model = timm.create_model(f'local-dir:{out}', pretrained=True)
  assert model.pretrained_cfg['label_names'] == list(CLASSES)
