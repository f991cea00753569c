"""A finished run's weights: which ones (raw or weight average) and their export to params.npz.

`workdir/params.npz` is in the published format, with the `metadata.json` a user needs beside
it (model, input size and normalisation, label names, accuracy), so it loads without the config.
"""

import os
from typing import Any, Dict

import jax
from absl import logging

from vit_jax import checkpoint
from vit_jax.weights import metadata as metadata_lib
from vit_jax.weights import store
from vit_jax.training import losses
from vit_jax.training import masked
from vit_jax.training import parallel
from vit_jax.training import run_record
from vit_jax.training import state as state_lib


def final_params(state: state_lib.State) -> Any:
  """The weights a run reports and exports: the weight average when `ema_decay` is set."""
  return state.get('ema_params', state['params'])


def exported_weights(ema_decay: float) -> str:
  """The name of the weights `final_params` returns (`ema_decay`: the run's weight average's,
  0 = none), as the log and metadata.json give it."""
  return 'ema' if ema_decay else 'raw'


def log_weight_average(ema_decay: float, total: int) -> None:
  """Says which weights the run exports; warns when the average cannot have left its start."""
  if not ema_decay:
    return
  initial = losses.ema_initial_weight(ema_decay, total)
  logging.info('Exporting the weight average (ema_decay=%g, warmed up as min(decay, '
               '(1+n)/(10+n))): after %d steps the initial weights are %.2g of it.',
               ema_decay, total, initial)
  if initial > 0.01:
    logging.warning('The weight average keeps %.0f%% of the initial weights after %d steps: '
                    'train longer or set --config.ema_decay=0 to export the raw weights.',
                    100 * initial, total)


def export_params(trainer: state_lib.Trainer, params: Any, workdir: str,
                  result: Dict[str, Any]) -> None:
  """Process 0 writes the final params as a published-format `workdir/params.npz`, and beside it
  `metadata.json`: the model, input size and label names a user needs without this config
  (embedded in the npz as well, so a copy under another name keeps it).

  Every process calls this: sharded params are gathered collectively first, and all return
  only once the files are complete, so any process may read them next (stage 2 fine-tunes
  this params.npz).
  """
  host = parallel.to_host(masked.encoder_params(trainer.run.trainer, params))
  if jax.process_index() == 0:
    _write_export(trainer, host, workdir, result)
  parallel.barrier('vit_jax: params.npz written')


def _write_export(trainer: state_lib.Trainer, host: Any, workdir: str,
                  result: Dict[str, Any]) -> None:
  run = trainer.run
  weights = exported_weights(run.ema_decay)
  extra = dict(ema_decay=run.ema_decay, accuracy_raw=result.get('accuracy_raw')
               ) if weights == 'ema' else {}
  description = dict(
      model_config=run.model_config, image_size=run.data.crop, mean=tuple(run.data.mean),
      std=tuple(run.data.std),
      # What the head was trained on (the record's), not what the folders are called today.
      class_names=run_record.head_class_names(workdir, trainer.info.class_names),
      dataset=run.data.dataset,
      step=trainer.total_steps,
      batch=run.data.batch,
      accuracy=result.get('accuracy'), num_examples=result.get('num_examples'),
      weights=weights, **extra, **{k: v for k, v in result.items()
                                   if k.startswith(('accuracy_', 'num_examples_'))
                                   and k != 'accuracy_raw'})
  if masked.is_self_supervised(run.trainer):  # An encoder: no head, no labels, no accuracy.
    description = dict(
        {k: v for k, v in description.items() if not k.startswith(('accuracy', 'num_examples'))},
        class_names=None, num_classes=0,
        self_supervised=masked.description(run.masked, trainer.total_steps, result,
                                           batch=run.data.batch, dataset=run.data.dataset,
                                           split=run.data.train))
  # The description goes inside the npz too: a renamed copy still says what model it is.
  path = checkpoint.save(host, os.path.join(workdir, store.PARAMS_FILE),
                         metadata=metadata_lib.describe_run(**description))
  metadata_lib.write_metadata(workdir, **description)
  logging.info('Exported the %s weights (%s) to %s (with %s)', weights,
               'weight average' if weights == 'ema' else 'not averaged', path,
               store.METADATA_FILE)
  raw, averaged = result.get('accuracy_raw'), result.get('accuracy')
  if raw is not None and averaged is not None and raw > averaged:
    # Chosen by the config, not by test accuracy (that would select on the test set).
    logging.warning('The raw weights evaluate better than the exported average (%.4f > %.4f); '
                    'rerun with --config.ema_decay=0 (or a smaller decay) to export them.',
                    raw, averaged)
