"""One path from a checkpoint source to a model: opened once, described once, fitted once."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from vit_jax import checkpoint
from vit_jax import config_lib
from vit_jax import models
from vit_jax.weights import loading
from vit_jax.weights import metadata as metadata_lib
from vit_jax.weights.timm import export as timm_export
from vit_jax.weights.timm import files as timm_files

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _init(config, size, num_classes=3):
  model = models.get_model(config, num_classes=num_classes)
  params = model.init(jax.random.key(0), jnp.zeros((1, size, size, 3)), train=False)['params']
  return jax.tree.map(np.asarray, params)


def _hub_folder(directory):
  """A tiny ViT written as a timm hub folder (config.json with ImageNet's mean/std)."""
  config = config_lib.small_vit('tiny', patch=8, hidden=16, layers=1, mlp=16, heads=2)
  return timm_export.export(_init(config, 16), config.to_dict(), str(directory), num_classes=3,
                            image_size=16, mean=IMAGENET_MEAN, std=IMAGENET_STD)


def test_a_finetune_from_a_hub_folder_reads_its_arrays_once(tmp_path, monkeypatch):
  from test_distributed import write_image_dataset
  from vit_jax import train
  folder = _hub_folder(tmp_path / 'hub')
  reads = []
  read_safetensors = timm_files.read_safetensors
  monkeypatch.setattr(timm_files, 'read_safetensors',
                      lambda path: reads.append(path) or read_safetensors(path))
  config = config_lib.with_dataset(config_lib.get_config(),
                                   write_image_dataset(str(tmp_path / 'data')))
  config.pp.update(dict(crop=16, train_aug='flip'))
  config.update(dict(pretrained_dir='', pretrained_path=folder, total_steps=1, batch=4,
                     batch_eval=4, accum_steps=1, warmup_steps=1, optim_dtype='float32',
                     eval_every=1, checkpoint_every=1, prefetch=1))
  workdir = str(tmp_path / 'run')
  assert train.train_and_evaluate(config, workdir)['step'] == 1
  assert reads == [os.path.join(folder, timm_files.WEIGHTS_FILE)]
  run = metadata_lib.read_metadata(workdir)  # The model, family and inputs of the hub folder.
  assert run['model']['family'] == 'vit' and run['model']['hidden_size'] == 16
  assert tuple(run['preprocessing']['mean']) == IMAGENET_MEAN
  # The choice is recorded once, in the run record (a resume reads it there), in no other file.
  with open(os.path.join(workdir, 'run.json'), encoding='utf-8') as f:
    assert tuple(json.load(f)['input']['mean']) == IMAGENET_MEAN
  assert not os.path.exists(os.path.join(workdir, 'input_normalization.json'))


def test_a_resnet_run_loads_with_or_without_its_model_file(tmp_path):
  """A ResNet run's export loads as it is, named by its preset, and checked by its model file
  (`--model=configs/resnet_fashion_mnist.py`, which `loading` rejected before)."""
  config = config_lib.with_model(config_lib.get_config(), 'ResNet-11_28px').model
  params = _init(config, 28)
  run = str(tmp_path / 'run')
  checkpoint.save(params, os.path.join(run, 'params.npz'))
  metadata_lib.write_metadata(run, model_config=config, image_size=28, dataset='fmnist',
                              class_names=['a', 'b', 'c'])
  x = np.random.default_rng(0).uniform(-1, 1, (2, 28, 28, 3)).astype(np.float32)
  want = models.get_model(config, num_classes=3).apply({'params': params}, x, train=False)
  for model in (None, 'ResNet-11_28px', 'configs/resnet_fashion_mnist.py'):
    loaded = loading.load_model(run, model)
    assert (loaded.config.family, loaded.image_size, loaded.class_names) == (
        'resnet', 28, ('a', 'b', 'c'))
    got = loaded.model.apply({'params': loaded.params}, x, train=False)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_the_official_api_and_the_teacher_fit_the_same_opened_source(tmp_path):
  """`checkpoint.load_pretrained` and `load_model` are both `open_source` + `fit_source`."""
  folder = _hub_folder(tmp_path / 'hub')
  source = loading.open_source(folder)
  assert source.description.config.family == 'vit'
  assert (source.description.mean, source.description.std) == (IMAGENET_MEAN, IMAGENET_STD)
  loaded = loading.model_from_source(source, 32)
  assert loaded.params['Transformer']['posembed_input']['pos_embedding'].shape == (1, 17, 16)
  init = _init(source.description.config, 32, num_classes=5)
  fitted = checkpoint.load_pretrained(pretrained_path=folder, init_params=init,
                                      model_config=source.description.config)
  assert jax.tree.map(np.shape, fitted) == jax.tree.map(np.shape, init)
  np.testing.assert_array_equal(fitted['Transformer']['posembed_input']['pos_embedding'],
                                loaded.params['Transformer']['posembed_input']['pos_embedding'])


def test_timm_file_or_npz_is_asked_once_per_opened_source(tmp_path, monkeypatch):
  """`store.locate` asks it; resolving, checking and reading carry its answer (3 asks before)."""
  folder = _hub_folder(tmp_path / 'hub')
  npz = str(tmp_path / 'tiny.npz')
  checkpoint.save(_init(config_lib.small_vit('tiny', patch=8, hidden=16, layers=1, mlp=16,
                                             heads=2), 16), npz)
  asked = []
  is_timm_source = timm_files.is_timm_source
  monkeypatch.setattr(timm_files, 'is_timm_source',
                      lambda path: asked.append(path) or is_timm_source(path))
  for name, family in ((folder, 'vit'), (npz, 'vit')):
    asked.clear()
    assert loading.open_source(name).description.config.family == family
    assert asked == [name]
  package = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'vit_jax')
  askers = sorted(os.path.relpath(os.path.join(d, f), package)
                  for d, _, files in os.walk(package) for f in files if f.endswith('.py')
                  and 'is_timm_source(' in open(os.path.join(d, f), encoding='utf-8').read())
  assert askers == ['weights/store.py', 'weights/timm/files.py']  # Its definition.
