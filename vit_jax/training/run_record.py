"""A run directory's record, `workdir/run.json`: what its weights were trained on and with.

Written by process 0 when a run starts (after the checkpoint is restored): the dataset's identity
(`input_pipeline.dataset_identity`: a TFDS name, config, version and splits, or a folder's class
names and a fingerprint of its file list), the config the command resolved to (the config file
evaluated with its overrides, so an edited file counts, not only another command line), the model
it trains, the class names of the head's outputs, and where the pretrained weights came from
with what they contributed (model or its position embedding, input mean/std, resolution).

A rerun in the same directory first compares its inputs with the record (`check`, the one
function here that reads the config: the record keeps the config itself) and, when they differ,
stops with one line before anything is written (no checkpoint, params.npz, metadata.json or
log line): a new `--workdir`, or `--config.allow_changed_inputs=True` to continue anyway (then
recorded in the record's `history`). A resumed run takes the model and mean/std the pretrained
weights contributed from the record (`with_recorded_contributions`): resuming never opens the
pretrained source, which may have moved. The exported class names are the record's: what the
head was trained on, whatever the folders are called today.
"""

import dataclasses
import datetime
import json
import os
from typing import Any, Dict, List, Optional

import jax
import ml_collections
from absl import logging

from vit_jax import config_lib
from vit_jax import input_pipeline
from vit_jax.weights import metadata as metadata_lib
from vit_jax.weights import store
from vit_jax.weights.timm import files as timm_files
from vit_jax.weights.architecture import plain_config
from vit_jax.data import image_ops
from vit_jax.training import parallel
from vit_jax.training import settings

RECORD_FILE = 'run.json'
# Config fields a rerun may change without changing what the weights are trained on or with:
# how long (raising total_steps continues a finished run), how often it logs, evaluates and
# saves, the eval batch, how the input pipeline is tuned (the batches are the same), how params
# are laid out over devices (fsdp computes what replicated does), where the data is found (its
# identity is compared instead: a moved folder is the same data) and this option itself. The
# split strings are compared as part of the dataset's identity.
MAY_CHANGE = frozenset({
    'total_steps', 'num_epochs', 'progress_every', 'eval_every', 'checkpoint_every',
    'keep_checkpoints', 'prefetch', 'data_autotune', 'batch_eval', 'dataset', 'tfds_data_dir',
    'tfds_manual_dir', 'allow_changed_inputs', 'pp.train', 'pp.test', 'pp.val', 'pp.train_eval',
    'param_sharding'})
_SHOWN = 3  # Differences named in the refusal line; the log has all of them.


class ChangedInputsError(ValueError):
  """A rerun's data or config differ from what the run directory's weights were trained on."""


@dataclasses.dataclass(frozen=True)
class Checked:
  """The outcome of `check`: the record (None: none, or nothing trained to protect), the
  dataset's identity now (None: not read, there was no record), the differences a rerun
  was allowed to continue with, and the config as the record keeps it (JSON's view)."""
  record: Optional[Dict[str, Any]]
  dataset: Optional[Dict[str, Any]]
  changes: List[str]
  config: Dict[str, Any]


def _plain(value: Any) -> Any:
  """JSON's view of a value (tuples → lists, ConfigDicts → dicts): what the record compares."""
  if isinstance(value, (ml_collections.ConfigDict, ml_collections.FrozenConfigDict)):
    value = value.to_dict()
  return json.loads(json.dumps(plain_config(value), default=str))


def _flat(tree: Any, prefix: str = '') -> Dict[str, Any]:
  if not isinstance(tree, dict):
    return {prefix: tree}
  flat = {}
  for key, value in tree.items():
    flat.update(_flat(value, f'{prefix}{key}.') if isinstance(value, dict) and value
                else {f'{prefix}{key}': value})
  return flat


def read(workdir: str) -> Optional[Dict[str, Any]]:
  """`workdir/run.json`, or None when the directory has none (a new run, or older code's)."""
  path = os.path.join(workdir, RECORD_FILE)
  if not os.path.isfile(path):
    return None
  try:
    with open(path, encoding='utf-8') as f:
      return json.load(f)
  except (OSError, ValueError) as e:
    raise ValueError(f'{path} is not readable JSON ({str(e).splitlines()[0]}); restore it, or '
                     'start a new --workdir.') from None


def has_trained(workdir: str) -> bool:
  """Whether `workdir` holds weights to protect: a checkpoint or an export."""
  return (os.path.exists(os.path.join(workdir, store.PARAMS_FILE))
          or store.has_saved_state(workdir))


def _dataset_changes(recorded: Dict[str, Any], now: Dict[str, Any]) -> List[str]:
  old_names, new_names = recorded.get('class_names'), now.get('class_names')
  changes = []
  if old_names != new_names:
    gone = [n for n in old_names or () if n not in (new_names or ())]
    new = [n for n in new_names or () if n not in (old_names or ())]
    changes.append(f'the classes are now {new_names} (were {old_names}' +
                   (f'; {gone} gone, {new} new)' if gone or new else '; another order)'))
  old_files, new_files = recorded.get('files') or {}, now.get('files') or {}
  for folder in sorted(set(old_files) | set(new_files)):
    if old_files.get(folder) != new_files.get(folder):
      counts = [(files or {}).get('images', 0) for files in (old_files.get(folder),
                                                              new_files.get(folder))]
      changes.append(f'the files of {folder}/ changed (were {counts[0]} images, now '
                     f'{counts[1]})' if counts[0] != counts[1] else
                     f'the files of {folder}/ changed ({counts[0]} images, other paths or sizes)')
  old, new = (_flat({k: v for k, v in d.items() if k not in ('class_names', 'files')})
              for d in (recorded, now))
  return changes + [f'dataset {key} is {new.get(key)!r} (was {old.get(key)!r})'
                    for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]


def _config_changes(recorded: Dict[str, Any], now: Dict[str, Any]) -> List[str]:
  # A field the record lacks came to the code after the run started: at its default (the base
  # config's) it trains as before.
  old, new, base = _flat(recorded), _flat(now), _flat(_plain(config_lib.get_config()))
  return [f'config {key} is {new.get(key)!r} (was {old.get(key)!r})'
          for key in sorted(set(old) | set(new))
          if key not in MAY_CHANGE and old.get(key, base.get(key)) != new.get(key)]


def differences(record: Dict[str, Any], config: Any, dataset: Dict[str, Any]) -> List[str]:
  """What differs between the record and this run's inputs, one phrase each (data first)."""
  return (_dataset_changes(record.get('dataset') or {}, dataset)
          + _config_changes(record.get('config') or {}, _plain(config)))


def check(config: ml_collections.ConfigDict, workdir: str) -> Checked:
  """Compares this run's inputs with `workdir`'s record; reads only, on every process.

  A directory without trained weights (no checkpoint, no params.npz) has nothing to protect:
  its record, if any, is replaced when the run starts.

  Raises:
    ChangedInputsError: the data or the config differ from the record and
      `config.allow_changed_inputs` is off; its first line names the first differences and the
      two ways on.
  """
  plain = _plain(config)
  record = read(workdir) if has_trained(workdir) else None
  if record is None:  # The dataset is described when the run starts (after its preflight).
    return Checked(None, None, [], plain)
  dataset = input_pipeline.dataset_identity(settings.data(config))
  changes = differences(record, config, dataset)
  if changes:
    logging.warning('%s was trained on other inputs than this run: %s', workdir,
                    '; '.join(changes))
    if not config.allow_changed_inputs:
      more = f' (and {len(changes) - _SHOWN} more, see the log)' if len(changes) > _SHOWN else ''
      raise ChangedInputsError(
          f'{workdir} holds a run trained on other inputs: {"; ".join(changes[:_SHOWN])}{more}. '
          f'Nothing was changed. Start a new --workdir for these inputs, or continue this run '
          f'anyway with --config.allow_changed_inputs=True (recorded in '
          f'{os.path.join(workdir, RECORD_FILE)}).')
  return Checked(record, dataset, changes, plain)


def with_recorded_contributions(run: settings.Run, record: Dict[str, Any]) -> settings.Run:
  """`run` completed as when it started: the model (or the named model's posemb) and input
  mean/std the pretrained weights contributed, from the record, so a resumed run never opens
  the pretrained source."""
  model, data = run.model_config, run.data
  if model is None:
    model = ml_collections.ConfigDict(plain_config(record['model'])).lock()
  elif 'posemb' in ((record.get('pretrained') or {}).get('contributed') or ()):
    model = ml_collections.ConfigDict(model.to_dict())
    model.posemb = record['model']['posemb']
    model.lock()
  if image_ops.is_official_normalization(data.mean, data.std):
    data = dataclasses.replace(data, mean=tuple(record['input']['mean']),
                               std=tuple(record['input']['std']))
  return dataclasses.replace(run, model_config=model, data=data)


def _pretrained_resolution(location: store.Location) -> Optional[int]:
  """The input side the pretrained weights were trained at, where their files say it."""
  path = location.path
  if store.is_remote(path) or not os.path.exists(path):
    return None
  try:
    if location.timm:
      timm_config = timm_files.read_config(timm_files.local_files(path)[1]) or {}
      size = (timm_config.get('pretrained_cfg') or {}).get('input_size')
      return int(size[-1]) if size else None
    size = (metadata_lib.read_metadata(path) or {}).get('image_size')
    return int(size) if size else None
  except (ValueError, OSError, TypeError):  # An unreadable description says nothing.
    return None


def _pretrained(user: settings.Run, run: settings.Run) -> Optional[Dict[str, Any]]:
  """Where the pretrained weights came from and what they contributed to the run."""
  location = run.pretrained_location()
  if not location:
    return None
  contributed = ['weights']
  if user.model_config is None:
    contributed.append('model')
  elif user.model_config.get('posemb', 'learn') != run.model_config.get('posemb', 'learn'):
    contributed.append('posemb')  # `from_checkpoint.with_checkpoint_model`.
  if (tuple(user.data.mean) != tuple(run.data.mean)
      or tuple(user.data.std) != tuple(run.data.std)):
    contributed.append('mean/std')
  return {'source': location.path, 'contributed': contributed,
          'resolution': _pretrained_resolution(location)}


def _now() -> str:
  return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')


def write(workdir: str, checked: Checked, user: settings.Run, run: settings.Run,
          class_names: Any, start: int, total: int) -> None:
  """Records this run's inputs in `workdir/run.json` (process 0; the others wait for it).

  Args:
    workdir: the run directory.
    checked: `check`'s outcome (with the config as the command resolved it: what a rerun is
      compared with).
    user: that config's settings.
    run: the same, completed from the pretrained weights (model, mean/std).
    class_names: the dataset's class names now.
    start: the step this run starts at; total: its last step.
  """
  record = checked.record
  if record is not None and not checked.changes:
    return  # The same inputs: the record stands as it is.
  if record is None:
    if has_trained(workdir):  # Trained by older code, which kept no record: adopted as it is.
      logging.warning('%s has no %s (older code): recording this run\'s inputs; a later rerun '
                      'is compared with them.', workdir, RECORD_FILE)
    history = [{'event': 'started', 'step': start, 'time': _now()}]
    head = list(class_names)
  else:
    history = list(record.get('history', [])) + [{
        'event': 'continued with changed inputs (allow_changed_inputs)', 'step': start,
        'time': _now(), 'changes': checked.changes}]
    # The head keeps what it was trained on unless it trains on the new labels from here.
    head = list(class_names) if start < total else record['class_names']
  dataset = checked.dataset or input_pipeline.dataset_identity(user.data)
  new = {
      'dataset': dataset, 'config': checked.config, 'class_names': head,
      'model': _plain(run.model_config),
      'input': {'crop': int(run.data.crop), 'mean': list(run.data.mean),
                'std': list(run.data.std)},
      'pretrained': (record or {}).get('pretrained') if record else _pretrained(user, run),
      'history': history}
  parallel.barrier('vit_jax: every process compared its inputs with the run record')
  if jax.process_index() == 0:
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, RECORD_FILE)
    tmp = f'{path}.tmp-{os.getpid()}'
    with open(tmp, 'w', encoding='utf-8') as f:
      json.dump(new, f, indent=1)
    os.replace(tmp, path)
  parallel.barrier('vit_jax: run record written')


def head_class_names(workdir: str, fallback: Any) -> Any:
  """The class names of the head's outputs: the record's (what it was trained on)."""
  record = read(workdir)
  return record['class_names'] if record else fallback
