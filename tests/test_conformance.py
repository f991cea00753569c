"""The family conformance suite: every registered family, and a made-up one, through every layer.

Each family's smallest preset at its `runlocal` size (its record's shrink rule: a 2x2 token grid)
trains 2 steps on a tiny image folder, exports params.npz + metadata.json, is read back
without naming the model, and goes through every tool: predict, features, analyze, flops,
few-shot and export_timm. What a family cannot do is refused in one line, and the refusal
follows from its record (`flops`, `timm_vit`, `resnet_root`, `masked_pretraining`) or its
module, never from its name. The same command again resumes the finished run from its saved
train state. `tests/toy_family/` is a family added by one folder; it passes the same suite.
"""

import json
import os

import jax
import numpy as np
import pytest
from PIL import Image

from vit_jax import checkpoint
from vit_jax import config_lib
from vit_jax import families
from vit_jax import models
from vit_jax import models_vit
from vit_jax import presets
from vit_jax import train
from vit_jax.data import image_ops
from vit_jax.tools import analyze
from vit_jax.tools import cli
from vit_jax.tools import export_timm
from vit_jax.tools import features
from vit_jax.tools import fewshot
from vit_jax.tools import flops
from vit_jax.tools import predict
from vit_jax.weights import loading

import toy_family
from test_self_supervised import validate_masked

CLASSES = ('dark', 'light')


@pytest.fixture(scope='module')
def folder(tmp_path_factory):
  """Two classes of 16px PNGs (3 train, 2 test each; brightness tells them apart)."""
  root = tmp_path_factory.mktemp('conformance')
  rng = np.random.default_rng(0)
  for split, count in (('train', 3), ('test', 2)):
    for c, name in enumerate(CLASSES):
      os.makedirs(root / split / name)
      for i in range(count):
        pixels = np.clip(rng.normal(70 + 110 * c, 30, (16, 16, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(root / split / name / f'{i}.png')
  return str(root)


def _stages(config):
  """How many entries the config's tuples hold (stages, depths per stage, patch sides): after
  the runlocal shrink (one block a stage) what its compile time grows with."""
  return sum(_stages(v) if isinstance(v, dict) else len(v) if isinstance(v, tuple) else 0
             for v in config.values())


def small_preset(family):
  """The family's preset with the fewest stages, then the smallest runlocal input (2x2 tokens:
  twice its token stride)."""
  names = [name for name, c in presets.MODEL_CONFIGS.items() if c.family == family]
  return min(names, key=lambda name: (_stages(presets.MODEL_CONFIGS[name].to_dict()),
                                      presets.token_stride(presets.MODEL_CONFIGS[name])))


def run_config(preset, dataset):
  """`preset` at its family's runlocal size, 2 steps of batch 4 on `dataset`, from scratch."""
  config = config_lib.with_model(config_lib.get_config(), preset)
  config_lib.shrink(config)
  config.dataset = dataset
  config.pp.update(dict(train='train', test='test', train_aug='none'))
  config.update(dict(pretrained_dir='', batch=4, batch_eval=4, eval_every=0, prefetch=1,
                     optim_dtype='float32', shuffle_buffer=8, checkpoint_every=2))
  return config


def _call(tool, args, capsys):
  rc = cli.call(tool, [tool.__name__.rsplit('.', 1)[-1], *args])
  out, err = capsys.readouterr()
  return rc, out, err


def _refused(tool_name, rc, out, err, words):
  assert rc == 1 and not out, (out, err)
  assert err.startswith(f'{tool_name}: error:') and words in err, err
  assert err.count('\n') == 1 and 'Traceback' not in err, err


@pytest.mark.parametrize('family', [*families.FAMILIES, toy_family.FAMILY.name])
def test_family_goes_through_every_layer(family, folder, tmp_path, monkeypatch, capsys, caplog):
  if family not in families.FAMILIES:
    toy_family.register(monkeypatch)
  record = families.FAMILIES[family]
  preset = small_preset(family)
  config = run_config(preset, folder)
  workdir = str(tmp_path / 'run')
  train.train_and_evaluate(config, workdir)
  exported = checkpoint.load(os.path.join(workdir, 'params.npz'))

  loaded = loading.load_model(workdir)  # The run's own description: no model named.
  assert loaded.config.family == family and tuple(loaded.class_names) == CLASSES
  assert loaded.config.model_name == config.model.model_name
  assert isinstance(loaded.model, models.module_of(family))
  image = os.path.join(folder, 'test', 'light', '0.png')

  rc, out, err = _call(predict, [f'--checkpoint={workdir}', image], capsys)
  assert rc == 0, err
  assert sorted(line.split('%', 1)[1].strip() for line in out.splitlines()[1:]) == list(CLASSES)

  has_tokens = issubclass(models.module_of(family), models_vit.VisionTransformer)
  try:
    result = features.extract_features(loaded.model, loaded.params,
                                       image_ops.load_images([image], loaded.image_size))
    assert has_tokens and result.pre_logits.shape[0] == 1
  except ValueError as e:
    assert not has_tokens and 'Features need a Vision Transformer' in str(e)
  rc, out, err = _call(analyze, [f'--checkpoint={workdir}', f'--out={tmp_path / "an"}', image],
                       capsys)
  if has_tokens:
    assert rc == 0 and os.path.isfile(tmp_path / 'an' / 'analysis.json'), err
  else:
    _refused('analyze', rc, out, err, 'Features need a Vision Transformer')

  rc, out, err = _call(flops, [f'--checkpoint={workdir}'], capsys)
  if record.flops:
    side = config.pp.crop
    assert rc == 0 and out.startswith(f'{preset} at {side}x{side}, 2 classes'), (out, err)
  else:
    _refused('flops', rc, out, err, f'is a {record.title} model, which it does not count')

  rc, out, err = _call(fewshot, [f'--checkpoint={workdir}', f'--dataset={folder}', '--json',
                                 '--shots=1', '--seeds=1', '--holdout=1', '--l2_regs=1',
                                 '--batch_size=4'], capsys)
  assert rc == 0, err
  assert [r['shots'] for r in json.loads(out)['results']] == [1]

  rc, out, err = _call(export_timm, [f'--checkpoint={workdir}', f'--out={tmp_path / "timm"}'],
                       capsys)
  if record.timm_vit and not record.resnet_root:
    assert rc == 0 and os.path.isfile(tmp_path / 'timm' / 'model.safetensors'), err
  elif record.timm_writer:  # Written under a timm architecture; a test preset is none.
    _refused('export_timm', rc, out, err, 'exported under its timm architecture')
  else:
    _refused('export_timm', rc, out, err, "timm's ViT cannot represent this model")

  mae = run_config(preset, folder)
  mae.trainer = 'mae'
  if not record.masked_pretraining:
    with pytest.raises(ValueError, match=rf'trainer=mae pretrains a plain ViT.* a {family}:'):
      validate_masked(mae)

  with caplog.at_level('WARNING'):  # Resumed: its saved train state restored, nothing trained.
    assert train.train_and_evaluate(config, workdir)['step'] == 2
  assert any('already trained all 2 steps' in r.getMessage() for r in caplog.records)
  again = checkpoint.load(os.path.join(workdir, 'params.npz'))
  jax.tree.map(np.testing.assert_array_equal, again, exported)
