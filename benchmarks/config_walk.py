"""The walk of `config` through a fine-tune from a timm hub folder: files entered, climbs up.

  PYTHONPATH=. python benchmarks/config_walk.py

Writes a tiny ViT as a hub folder (config.json with `model_args`) and a 3-class image folder,
then runs `train.train_and_evaluate` for one step with no model named (the hub folder says
what it is) under `sys.setprofile`. Counted, for every call of a function in `vit_jax/` that
receives the config (an `ml_collections.ConfigDict` argument, the run's config or a part of
it, or an object whose `.config` is one, as `training.state.Trainer`):
- files entered: the distinct `vit_jax/` files of those functions;
- climbs back up: distinct (caller file, callee file) pairs where the callee's layer (as in
  .importlinter: families < presets < config_lib < models < weights < checkpoint.py < data
  < input_pipeline < training < train < tools < main) is above the caller's, the caller
  being the nearest `vit_jax/` frame below; counted
  for those calls and, separately, for every call into `vit_jax/` during the run;
- reads of the hub folder's weights (`safetensors.numpy.load_file` calls).
The same script runs on older commits (it uses only APIs they have).
"""

import collections
import os
import sys
import tempfile

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from PIL import Image

import safetensors.numpy
from vit_jax import config_lib
from vit_jax import models
from vit_jax import train
from vit_jax.weights.timm import export as timm_export

PACKAGE = os.path.dirname(os.path.abspath(models.__file__))
# Layer of each vit_jax module (lowest 0), as .importlinter orders them (the commands: 15).
LAYERS = (('families', 0), ('presets', 1), ('config_lib', 2), ('position_embeddings', 3),
          ('ops', 3), ('models_resnet', 4), ('models_vit', 5), ('models_mixer', 5),
          ('models_swin', 5), ('models_masked', 6), ('models.py', 7), ('weights/', 8),
          ('checkpoint.py', 9), ('data/', 10), ('input_pipeline', 11), ('training/', 12),
          ('train.py', 13), ('tools/', 14), ('main.py', 16))


def layer(path: str) -> int:
  rel = os.path.relpath(path, PACKAGE)
  return next((rank for prefix, rank in LAYERS if rel.startswith(prefix)), 15)


def write_inputs(root: str) -> tuple:
  """(hub folder, image folder) of a 16px ViT and 3 classes of 16x16 images."""
  config = config_lib.get_config()
  model_config = config_lib.with_model(config, 'testing').model
  model_config.update(dict(hidden_size=16, patches={'size': (8, 8)}))
  model_config.transformer.update(dict(mlp_dim=16, num_heads=2, dropout_rate=0.))
  model = models.get_model(model_config, num_classes=3)
  params = model.init(jax.random.key(0), jnp.zeros((1, 16, 16, 3)), train=False)['params']
  folder = timm_export.export(jax.tree.map(np.asarray, params), model_config.to_dict(),
                              os.path.join(root, 'hub'), num_classes=3, image_size=16,
                              mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
  rng = np.random.default_rng(0)
  for split, count in (('train', 8), ('test', 3)):
    for c in range(3):
      os.makedirs(os.path.join(root, 'data', split, f'class{c}'), exist_ok=True)
      for i in range(count):
        pixels = np.clip(rng.normal(60 + 70 * c, 30, (16, 16, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(os.path.join(root, 'data', split, f'class{c}', f'{i}.png'))
  return folder, os.path.join(root, 'data')


def walk(config: ml_collections.ConfigDict, workdir: str) -> dict:
  files, climbs, all_climbs, reads = collections.Counter(), set(), set(), []
  load_file = safetensors.numpy.load_file

  def counting_load_file(path, *args, **kwargs):
    reads.append(path)
    return load_file(path, *args, **kwargs)

  def profile(frame, event, arg):
    del arg
    code = frame.f_code
    if event != 'call' or not code.co_filename.startswith(PACKAGE):
      return
    caller = frame.f_back
    while caller is not None and not caller.f_code.co_filename.startswith(PACKAGE):
      caller = caller.f_back
    climb = None
    if caller is not None and layer(code.co_filename) > layer(caller.f_code.co_filename):
      climb = (os.path.relpath(caller.f_code.co_filename, PACKAGE),
               os.path.relpath(code.co_filename, PACKAGE))
      all_climbs.add(climb)
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    if not any(carries_config(frame.f_locals.get(n)) for n in names):
      return
    files[code.co_filename] += 1
    if climb:
      climbs.add(climb)

  safetensors.numpy.load_file = counting_load_file
  sys.setprofile(profile)
  try:
    train.train_and_evaluate(config, workdir)
  finally:
    sys.setprofile(None)
    safetensors.numpy.load_file = load_file
  return dict(files=sorted(os.path.relpath(f, PACKAGE) for f in files),
              climbs=sorted(climbs), all_climbs=sorted(all_climbs), reads=len(reads))


def carries_config(value) -> bool:
  return isinstance(value, ml_collections.ConfigDict) or isinstance(
      getattr(value, 'config', None), ml_collections.ConfigDict)


def main() -> None:
  root = tempfile.mkdtemp()
  folder, data = write_inputs(root)
  config = config_lib.with_dataset(config_lib.get_config(), data)
  config.pp.update(dict(crop=16, train_aug='flip'))
  config.update(dict(pretrained_dir='', pretrained_path=folder, total_steps=1, batch=4,
                     batch_eval=4, accum_steps=1, warmup_steps=1, optim_dtype='float32',
                     eval_every=1, checkpoint_every=1, prefetch=1))
  result = walk(config.lock(), os.path.join(root, 'run'))
  print(f'files entered: {len(result["files"])}: {" ".join(result["files"])}')
  print(f'climbs back up: {len(result["climbs"])}: '
        + ' '.join(f'{a}->{b}' for a, b in result['climbs']))
  print(f'climbs back up, any call: {len(result["all_climbs"])}: '
        + ' '.join(f'{a}->{b}' for a, b in result['all_climbs']))
  print(f'reads of the hub weights: {result["reads"]}')


if __name__ == '__main__':
  main()
