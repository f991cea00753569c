"""Resumable training state: the orbax manager of `workdir/train_state`, save and restore.

Kept apart from the published npz format (`vit_jax.checkpoint`): these saved states hold the
whole train state (params, optimizer state, step, rng, weight average) and exist to resume a
run exactly. Beyond flax's examples/imagenet (save, restore latest) this module does three
things: a damaged step (unreadable files, e.g. after a kill mid-write) is named in the log,
left on disk and hidden from the manager while an older step is resumed; a checkpoint written
by another config fails with one line naming the first difference; and with several processes
all agree on the step they resume from.
"""

import contextlib
import os
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging

from vit_jax.weights import store

State = Dict[str, Any]

class _WithoutSteps(ocp.step.NameFormat):
  """orbax's standard step names, minus steps that could not be read.

  Hidden from the manager, a damaged step neither counts as the latest step (which would make
  orbax skip every save up to it) nor towards `keep_checkpoints` (which would delete it later).
  """

  def __init__(self, hidden: Sequence[int]):
    self._standard, self._hidden = ocp.step.standard_name_format(), frozenset(hidden)

  def build_name(self, step: int) -> str:
    return self._standard.build_name(step)

  def find_all(self, base_path: Any) -> Iterator[Any]:
    return (m for m in self._standard.find_all(base_path) if m.step not in self._hidden)

  def find_step(self, base_path: Any, step: int) -> Any:
    if step in self._hidden:
      raise ValueError(f'Step {step} in {base_path} is damaged and skipped by this run.')
    return self._standard.find_step(base_path, step)


def make_checkpoint_manager(workdir: str, keep: int,
                            damaged: Sequence[int] = ()) -> ocp.CheckpointManager:
  """The orbax manager of `store.state_dir(workdir)`, keeping the newest `keep` train states
  (`config.keep_checkpoints`); `damaged` steps stay on disk, unseen by it."""
  options = ocp.CheckpointManagerOptions(max_to_keep=keep,
                                         create=True, step_name_format=_WithoutSteps(damaged))
  # The handler is named so that `item_metadata` can read a checkpoint's tree before restoring.
  return ocp.CheckpointManager(os.path.abspath(store.state_dir(workdir)),
                               options=options, item_handlers=ocp.StandardCheckpointHandler())


@contextlib.contextmanager
def unmade_if_refused(workdir: str) -> Iterator[None]:
  """Removes the run directory and its train_state/ folder (and parents) again, where this run
  made them and they are still empty, when the run is refused (a user error) before it wrote
  anything:
  `make_checkpoint_manager` creates them before the trainer's checks (batch size, classes,
  splits) can refuse the config. `python -m vit_jax.main` also undoes its log file."""
  made, path = [], os.path.abspath(store.state_dir(workdir))
  while not os.path.exists(path):  # train_state/, the run directory, its missing parents.
    made.append(path)
    path = os.path.dirname(path)
  try:
    yield
  except (ValueError, FileNotFoundError, PermissionError):
    for path in made:  # The deepest first.
      try:
        os.rmdir(path)  # Only if empty (another process of the run may have written there).
      except OSError:
        pass
    raise


def save_checkpoint(manager: ocp.CheckpointManager, step: int, state: State) -> None:
  """Saves `state`, except over a damaged checkpoint of the same step (kept; never deleted)."""
  path = manager.directory / str(step)
  if path.exists() and step not in manager.all_steps():
    logging.warning('Not saving step %d: %s holds the damaged checkpoint named at start-up; '
                    'move it away to let this step be saved.', step, path)
    return
  manager.save(step, args=ocp.args.StandardSave(state))


def _leaf_shapes(tree: Any) -> Dict[str, Any]:
  # Simple key names: a named-tuple field (a dict on disk) reads the same as a dict key.
  return {jax.tree_util.keystr(path, simple=True, separator='/'): tuple(getattr(leaf, 'shape', ()))
          for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def state_mismatch(saved: Any, expected: Any) -> Optional[str]:
  """The first difference between a checkpoint's tree and the state this config builds."""
  saved, expected = _leaf_shapes(saved), _leaf_shapes(expected)
  missing, extra = sorted(expected.keys() - saved.keys()), sorted(saved.keys() - expected.keys())
  if missing:
    return f'it lacks {len(missing)} entries this config needs, e.g. {missing[0]}'
  if extra:
    return f'it has {len(extra)} entries this config does not, e.g. {extra[0]}'
  for key, shape in expected.items():
    if saved[key] != shape:
      return f'{key} has shape {saved[key]} there and {shape} here'
  return None


def _one_line(error: BaseException) -> str:
  lines = str(error).strip().splitlines() or ['']
  return f'{type(error).__name__}: {lines[0][:300]}'


def _agreed(read: Callable[[], Any]) -> Tuple[Any, Optional[str]]:
  """(read(), None), or (None, why) when it failed here or on another process.

  The processes agree before going on, so none enters a collective read that another skips.
  """
  try:
    value, error = read(), None
  except Exception as e:  # orbax and tensorstore raise many types for unreadable files.
    value, error = None, _one_line(e)
  ok = error is None
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # Only for multi-process runs.
    ok = bool(np.all(multihost_utils.process_allgather(np.int32(ok))))
  return (value, None) if ok else (None, error or 'unreadable on another process')


def _try_restore(manager: ocp.CheckpointManager, step: int,
                 abstract: State) -> Tuple[Optional[State], Optional[str]]:
  """(state, None), or (None, the error) when the step's files cannot be read on some process.

  A readable checkpoint of another config is not damage: it raises the usual ValueError.
  """
  saved, error = _agreed(lambda: manager.item_metadata(step).tree)
  if error:
    return None, error
  mismatch = state_mismatch(saved, abstract)
  if mismatch:
    raise ValueError(f'The checkpoint at step {step} in {manager.directory} was written by '
                     f'another config ({mismatch}; a different model, optim or ema_decay?): '
                     'rerun with that config, or start a new --workdir.')
  return _agreed(lambda: manager.restore(step, args=ocp.args.StandardRestore(abstract)))


def restore_or_init(manager: ocp.CheckpointManager, abstract: Callable[[], State],
                    init: Callable[[], State]) -> Tuple[State, Tuple[int, ...]]:
  """The newest readable checkpoint of `manager`, else `init()` (pretrained npz or scratch).

  Args:
    manager: from `make_checkpoint_manager`.
    abstract: returns the state's shapes, dtypes and shardings (`jax.ShapeDtypeStruct` leaves);
      called only when there is a checkpoint, which is restored into that tree and sharding.
    init: returns the initial state; called only when there is no checkpoint.

  Returns:
    The state and the steps found damaged (newer than the one resumed from). Each is named in
    one log line and left on disk untouched; reopen the manager without them
    (`make_checkpoint_manager(..., damaged)`). With several processes a step counts as readable
    only if every process read it, so all resume from the same step.
  """
  steps = sorted(manager.all_steps(), reverse=True)
  if not steps:
    return init(), ()
  target, damaged = abstract(), []
  for step in steps:
    state, error = _try_restore(manager, step, target)
    if error is None:
      logging.info('Resuming from checkpoint at step %d in %s', step, manager.directory)
      return state, tuple(damaged)
    logging.warning('Checkpoint %s/%d cannot be read (%s); left as it is, trying an older one.',
                    manager.directory, step, error)
    damaged.append(step)
  raise ValueError(f'No checkpoint in {manager.directory} can be read (steps '
                   f'{", ".join(map(str, damaged))}; see the log): start a new --workdir, or '
                   'move the damaged step directories out of it to start afresh.')
