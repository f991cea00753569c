"""A run's pretrained source, opened once, and the run completed from it: model (or a named
model's position embedding) and input.

Fine-tuning a timm hub folder, a .safetensors file or any npz needs neither a model name nor
the weights' mean/std in the config: `train_and_evaluate` opens the source once
(`PretrainedSource`), completes the run's settings (`settings.Run`) from its description here,
and `state.init_state` fits the same arrays to the model.
"""

import dataclasses
from typing import Optional

import ml_collections
from absl import logging

from vit_jax import families
from vit_jax import presets
from vit_jax.weights import loading
from vit_jax.weights import store
from vit_jax.data import image_ops
from vit_jax.training import settings

# The position embeddings without parameters: a file without tables or description holds either.
_TABLE_FREE_POSEMBS = ('sincos2d', 'rope', 'none')


class PretrainedSource:
  """A run's pretrained source, opened (read, converted, described) at most once.

  `open(name)` returns the `loading.Source` of `name`, reading it on the first call only; every
  step of a run that needs the pretrained checkpoint (its model, its input normalisation, its
  weights) asks this object, so a hub folder's arrays are read and converted once.
  """

  def __init__(self):
    self._source: Optional[loading.Source] = None

  def open(self, name: str) -> loading.Source:
    location = store.locate(name)
    if self._source is None or self._source.path != location.path:
      self._source = loading.open_source(name, location=location)
    return self._source


def with_checkpoint_model(run: settings.Run, pretrained: Optional[PretrainedSource] = None
                          ) -> settings.Run:
  """`run` with its model read from its `pretrained_path` when the config names none, and
  with the checkpoint's position embedding when it names one (`_with_checkpoint_posemb`).

  This is how a timm hub folder, .safetensors file or hf-hub name (or any npz) is fine-tuned
  without a model name (`configs/hub.py`): the checkpoint says what it is (its shapes completed
  by its description: the run's metadata.json, a <name>.json beside it, the one embedded in the
  npz, a timm config.json); dropout stays 0.
  """
  if run.model_config is not None:
    return _with_checkpoint_posemb(run, pretrained)
  if not run.pretrained_path:
    raise ValueError('config.model is not set: name a model (e.g. configs/vit.py:b16,DATASET) '
                     'or pass --config.pretrained_path=<checkpoint> to fine-tune what it holds.')
  source = (pretrained or PretrainedSource()).open(run.pretrained_path)
  loading.warn_assumed(source, source.description.assumed,
                       'name the model (configs/vit.py:MODEL,DATASET)')
  model = source.description.config.lock()  # Locked as the config it completes.
  logging.info('Model from %s: %s.', run.pretrained_path, model.model_name)
  return dataclasses.replace(run, model_config=model)


def _with_checkpoint_posemb(run: settings.Run,
                            pretrained: Optional[PretrainedSource]) -> settings.Run:
  """`run` with the ViT position embedding (`posemb`) of the weights it fine-tunes.

  The kind is part of the architecture the weights were trained with, as their widths are: its
  tables ('learn', 'learn_2d', 'relative', 'rope_mixed') are read from the file's shapes,
  'sincos2d' vs 'rope' vs 'none' from its description. Where the file cannot tell (no tables,
  no description), a table-free choice of the config stays. A local file only (published ones
  are 'learn'); a resumed run reads the choice from its record
  (`run_record.with_recorded_contributions`).
  """
  family = presets.family_of(run.model_config)
  if not run.pretrained_path or 'posemb' not in families.FAMILIES[family].extras:
    return run
  location = store.locate(run.pretrained_path)
  if store.is_remote(location.path) or store.check_available(location):
    return run  # A published npz ('learn'), or missing: preflight says so.
  source = (pretrained or PretrainedSource()).open(run.pretrained_path)
  described = source.description
  if presets.family_of(described.config) != family:
    return run  # Another model altogether: fitting the weights names the difference.
  posemb, current = described.config.get('posemb', 'learn'), run.model_config.get('posemb',
                                                                                  'learn')
  assumed = [a for a in described.assumed if a.startswith('posemb ')]
  if posemb == current or (assumed and current in _TABLE_FREE_POSEMBS):
    return run
  if assumed:
    loading.warn_assumed(source, assumed, 'set --config.model.posemb')
  logging.info('Position embedding of %s: posemb %r (the config says %r); fine-tuning the model '
               'it holds.', run.pretrained_path, posemb, current)
  model = ml_collections.ConfigDict(run.model_config.to_dict())
  model.posemb = posemb
  return dataclasses.replace(run, model_config=model.lock())


def with_checkpoint_normalization(run: settings.Run,
                                  pretrained: Optional[PretrainedSource] = None
                                  ) -> settings.Run:
  """`run` with the input mean/std of the weights its `pretrained_path` holds.

  Only when the config leaves them at the official default and the weights expect others
  (CLIP's, DINOv2's or Swin's ImageNet values in a timm config.json, or a run fine-tuned with
  them): then training, eval and the exported metadata all use the weights' values. A new run
  records the choice in its run record (`run_record.write`, run.json's `input`), which a resume
  reads back (`run_record.with_recorded_contributions`) instead of calling this, so a resumed
  run's inputs never change midway. Writes nothing.
  """
  data = run.data
  if not image_ops.is_official_normalization(data.mean, data.std) or not run.pretrained_path:
    return run
  location = store.locate(run.pretrained_path)
  if store.is_remote(location.path) or store.check_available(location):
    return run  # A published npz (official inputs), or missing: preflight says so.
  described = (pretrained or PretrainedSource()).open(run.pretrained_path).description
  mean, std = described.mean, described.std
  if image_ops.is_official_normalization(mean, std):
    return run
  logging.info('Input normalisation of %s: (x / 255 - mean) / std with mean %s, std %s (not '
               'x / 127.5 - 1); set --config.pp.mean/--config.pp.std to choose others.',
               run.pretrained_path, mean, std)
  return dataclasses.replace(run, data=dataclasses.replace(data, mean=tuple(mean),
                                                            std=tuple(std)))
