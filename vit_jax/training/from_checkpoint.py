"""A run's config completed from the checkpoint it fine-tunes: its model and input normalisation.

Fine-tuning a timm hub folder, a .safetensors file or any npz needs neither a model name nor
the weights' mean/std in the config: `train_and_evaluate` reads them here first.
"""

import json
import os

import jax
import ml_collections
from absl import logging

from vit_jax.checkpoints import architecture
from vit_jax.checkpoints import loading
from vit_jax.checkpoints import metadata as metadata_lib
from vit_jax.checkpoints import store
from vit_jax.checkpoints import timm_files
from vit_jax.data import image_ops


def with_checkpoint_model(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """`config` with `model` read from `config.pretrained_path` when the config names none.

  This is how a timm hub folder, .safetensors file or hf-hub name (or any npz) is fine-tuned
  without a model name (`configs/hub.py`): the checkpoint says what it is; dropout stays 0.
  """
  if config.model is not None:
    return config
  if not config.pretrained_path:
    raise ValueError('config.model is not set: name a model (e.g. configs/vit.py:b16,DATASET) '
                     'or pass --config.pretrained_path=<checkpoint> to fine-tune what it holds.')
  path = store.resolve_name(config.pretrained_path)
  _, arch = loading.load_architecture(path)
  # What the shapes cannot tell (posemb 'none' vs 'sincos2d', ...) the file's description does:
  # the run's metadata.json, a <name>.json beside it or the one embedded in the npz.
  described = (None if timm_files.is_timm_source(path)
               else (metadata_lib.read_metadata(path) or {}).get('model'))
  if described:
    arch = architecture.conform(arch, described, store.METADATA_FILE)
  if arch.assumed:
    logging.warning('%s does not say %s: assumed. To state them, put a %s beside it (the format '
                    'of a run\'s %s) or name the model (configs/vit.py:MODEL,DATASET).',
                    config.pretrained_path, '; '.join(arch.assumed),
                    os.path.basename(metadata_lib.sidecar_path(path)), store.METADATA_FILE)
  config = ml_collections.ConfigDict(config.to_dict())
  config.model = arch.config
  logging.info('Model from %s: %s.', config.pretrained_path, config.model.model_name)
  return config.lock()


NORMALIZATION_FILE = 'input_normalization.json'


def with_checkpoint_normalization(config: ml_collections.ConfigDict, workdir: str
                                  ) -> ml_collections.ConfigDict:
  """`config` with `pp.mean`/`pp.std` of the weights `config.pretrained_path` holds.

  Only when the config leaves them at the official default and the weights expect others
  (CLIP's, DINOv2's or Swin's ImageNet values in a timm config.json, or a run fine-tuned with
  them): then training, eval and the exported metadata all use the weights' values. The choice
  is recorded in `workdir/input_normalization.json` on first start and read back on resume, so
  a resumed run's inputs never change midway, even when the pretrained file is gone by then.
  """
  pp = config.pp
  if not image_ops.is_official_normalization(pp.mean, pp.std):
    return config
  recorded = os.path.join(workdir, NORMALIZATION_FILE)
  if os.path.isfile(recorded):
    with open(recorded, encoding='utf-8') as f:
      saved = json.load(f)
    mean, std = tuple(saved['mean']), tuple(saved['std'])
  elif config.pretrained_path:
    path = store.resolve_name(config.pretrained_path)
    if store.is_remote(path) or store.check_available(path):
      return config  # A published npz (official inputs), or missing: preflight says so.
    mean, std = metadata_lib.input_normalization(path)
  else:
    return config
  if image_ops.is_official_normalization(mean, std):
    return config
  logging.info('Input normalisation of %s: (x / 255 - mean) / std with mean %s, std %s (not '
               'x / 127.5 - 1); set --config.pp.mean/--config.pp.std to choose others.',
               config.pretrained_path, mean, std)
  if jax.process_index() == 0 and not os.path.isfile(recorded):
    os.makedirs(workdir, exist_ok=True)
    with open(recorded, 'w', encoding='utf-8') as f:
      json.dump({'mean': list(mean), 'std': list(std), 'from': config.pretrained_path}, f)
  config = ml_collections.ConfigDict(config.to_dict())
  config.pp.mean, config.pp.std = tuple(mean), tuple(std)
  return config.lock()
