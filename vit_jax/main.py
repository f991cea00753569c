r"""Trains or fine-tunes a ViT: `python -m vit_jax.main --config=configs/vit_b16_cifar10.py`.

Kept short on purpose: flags, logging, then the trainer named by `config.trainer`.
Examples:
  python -m vit_jax.main --config=configs/fashion_mnist_quickstart.py --workdir=runs/quick
  python -m vit_jax.main --config=configs/vit.py:b16,cifar10 --config.batch=64

Exit codes: 0 finished (params.npz written); 1 a user error (one line on stderr), or another
process of a multi-process run stopped with an error (one line naming it: every process stops);
2 an unknown config field; 75 another process of a multi-process run was lost (see
--peer_timeout; restart every process, as the printed line says); 143 stopped by SIGTERM with a
checkpoint saved and steps left (rerun the printed command to continue; 143 = 128 + SIGTERM,
as a killed job); 130 Ctrl-C (Python's KeyboardInterrupt: checkpoints written so far are kept).

On CPU, `scripts/hugepages.sh python -m vit_jax.main ...` runs it with transparent huge pages
for malloc: fewer page faults, faster steps (docs/performance.md, "Page faults").
"""

import functools
import hashlib
import importlib
import json
import logging as python_logging
import os
import re
import shlex
import sys
import traceback
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from vit_jax import config_lib


# config.trainer → 'module:function(config, workdir)', imported only when chosen (jax is slow to
# import, and inference_time is only needed for throughput runs).
TRAINERS = {
    'train': 'vit_jax.train:train_and_evaluate',
    'pretrain_then_finetune': 'vit_jax.train:pretrain_then_finetune',
    'inference_time': 'vit_jax.inference_time:inference_time',
    'mpp': 'vit_jax.train:train_and_evaluate',  # The loop runs the masked trainers too.
    'mae': 'vit_jax.train:train_and_evaluate',
}
# config.trainer → what compares a rerun with its run directory's record before anything is
# written (the log file included); trainers without a record have none.
INPUT_CHECKS = {
    'train': 'vit_jax.train:check_inputs',
    'pretrain_then_finetune': 'vit_jax.train:check_inputs',
}
# Config fields (any stage's) left out of the default run directory's name: they tell how to
# treat the run that is there, they do not make another one.
NOT_IN_RUN_NAME = ('allow_changed_inputs',)
LOG_FILE = 'train.log'
# A run stopped by SIGTERM with work left exits as a process killed by SIGTERM would (128 + 15),
# so schedulers that restart only failed jobs restart it; 0 means params.npz exists.
EXIT_STOPPED = 128 + 15

_WORKDIR = flags.DEFINE_string(
    'workdir', None, 'Run directory (default: runs/<config stem>[_<arg>]-<hash of the config '
    'file, its arg and the --config.* overrides>, so the same command resumes the same run).')
_COORDINATOR = flags.DEFINE_string(
    'coordinator_address', None, 'host:port of process 0 for multi-process runs '
    '(or $JAX_COORDINATOR_ADDRESS); TPU pods and SLURM are detected automatically.')
_NUM_PROCESSES = flags.DEFINE_integer('num_processes', None, 'Processes in a multi-process run.')
_PROCESS_ID = flags.DEFINE_integer('process_id', None, 'This process index (0-based).')
_PEER_TIMEOUT = flags.DEFINE_integer(
    'peer_timeout', 60, 'Multi-process runs: seconds without a heartbeat from another process '
    'after which this one exits with code 75 and one line naming it (JAX\'s own abort, its '
    'backstop, comes at the earliest 30 s later).', lower_bound=1)
config_flags.DEFINE_config_file('config', None, 'Experiment config file (file.py or file.py:arg).',
                                lock_config=True)
flags.mark_flags_as_required(['config'])


def default_workdir(config_spec: str, overrides: Mapping[str, Any]) -> str:
  """The run directory a command names without `--workdir`: the same command, the same run.

  Derived from the command alone (no time, no host), so a rerun resumes where the last run
  stopped and every process of a multi-host run agrees without talking to the others. The
  overrides are normalised: their order and spelling (`--config.batch=064` = `=64`) do not
  matter, their parsed values do.

  Args:
    config_spec: the `--config` value, `path/file.py` or `path/file.py:arg`.
    overrides: the parsed `--config.*` overrides, {dotted field: value}.

  Returns:
    `runs/<file stem>[_<arg>]-<8 hex digits>`, e.g. `runs/vit_b16_cifar10-1f0c3a9e`; the hash
    covers the normalised file path, the arg and the overrides, so other files or overrides
    never share a directory; overrides that say how to treat the run (`NOT_IN_RUN_NAME`) do not
    count, so `--config.allow_changed_inputs=True` continues the run it is added to.
  """
  path, _, arg = config_spec.partition(':')
  stem = os.path.splitext(os.path.basename(path))[0]
  name = re.sub(r'[^A-Za-z0-9.=-]+', '_', f'{stem}_{arg}' if arg else stem).strip('_')
  # `configs/vit.py`, `./configs/vit.py` and `$PWD/configs/vit.py` are one file: one key.
  relative = os.path.relpath(os.path.abspath(path))
  path = os.path.abspath(path) if relative.startswith(os.pardir) else relative
  key = json.dumps([path, arg, sorted((field, repr(value)) for field, value in overrides.items()
                                     if field.split('.')[-1] not in NOT_IN_RUN_NAME)])
  return os.path.join('runs', f'{name[:80]}-{hashlib.sha256(key.encode()).hexdigest()[:8]}')


def command_workdir() -> str:
  """`--workdir`, else the directory this command's config and overrides name."""
  if _WORKDIR.value:
    return _WORKDIR.value
  flag = flags.FLAGS['config']
  return default_workdir(config_flags.get_config_filename(flag),
                         config_flags.get_override_values(flag))


def add_file_logger(workdir: str) -> python_logging.FileHandler:
  """Mirrors log lines into `workdir/train.log` (appending, so a resumed run keeps history)."""
  os.makedirs(workdir, exist_ok=True)
  handler = python_logging.FileHandler(os.path.join(workdir, LOG_FILE), mode='a')
  handler.setFormatter(logging.PythonFormatter())
  handler.addFilter(QuietLibraries())
  python_logging.getLogger().addHandler(handler)
  return handler


def list_workdir(workdir: str) -> Optional[Dict[str, Tuple[int, int]]]:
  """What a run directory holds: every file and folder under it (relative path, '.' for the
  directory itself) with (size, mtime_ns), a folder's size -1; None if there is none."""
  if not os.path.isdir(workdir):
    return None
  listing = {}
  for parent, folders, files in os.walk(workdir):
    for name in ['.'] * (parent == workdir) + folders + files:
      path = os.path.normpath(os.path.join(parent, name))
      stat = os.stat(path)
      size = -1 if os.path.isdir(path) else stat.st_size
      listing[os.path.relpath(path, workdir)] = (size, stat.st_mtime_ns)
  return listing


def undo_refused_run(workdir: str, before: Optional[Dict[str, Tuple[int, int]]],
                     log: python_logging.FileHandler) -> bool:
  """Puts `workdir` back as it was `before` (`list_workdir`) when a run refused to start only
  added lines to its log and empty folders (orbax's train_state/); returns whether it did.

  A run that wrote anything else (a checkpoint, metrics, its record) is left as it is.
  """
  python_logging.getLogger().removeHandler(log)
  log.close()
  before, after = before or {}, list_workdir(workdir) or {}
  changed = [p for p, (size, mtime) in after.items() if p not in before or (
      size >= 0 and (size, mtime) != before[p])]
  if set(before) - set(after) or any(after[p][0] >= 0 and p != LOG_FILE for p in changed):
    return False
  for path in sorted((p for p in changed if after[p][0] < 0 and p != '.'), reverse=True):
    os.rmdir(os.path.join(workdir, path))
  log_path = os.path.join(workdir, LOG_FILE)
  if LOG_FILE in before:
    os.truncate(log_path, before[LOG_FILE][0])
  elif os.path.exists(log_path):
    os.remove(log_path)
  if not before:
    os.rmdir(workdir)
  for path, (size, mtime) in before.items():  # Folders (and the log) get their times back.
    if size < 0 or path == LOG_FILE:
      os.utime(os.path.join(workdir, path), ns=(os.stat(os.path.join(workdir, path)).st_atime_ns,
                                                mtime))
  return True


class QuietLibraries(python_logging.Filter):
  """Drops INFO chatter of orbax and TFDS (dozens of lines per checkpoint); keeps warnings."""

  NOISY = (f'{os.sep}orbax{os.sep}', f'{os.sep}tensorflow_datasets{os.sep}')

  def filter(self, record: python_logging.LogRecord) -> bool:
    return record.levelno >= python_logging.WARNING or not any(
        part in record.pathname for part in self.NOISY)


def get_trainer(name: str) -> Callable[[Any, str], Dict[str, Any]]:
  """The function that runs `config.trainer`."""
  return _import(TRAINERS[config_lib.check_choice('trainer', name)])


def check_inputs(config: Any, workdir: str) -> None:
  """Stops a rerun whose inputs differ from its run directory's record, before any write."""
  if config.trainer in INPUT_CHECKS:
    _import(INPUT_CHECKS[config.trainer])(config, workdir)


def _import(target: str) -> Callable:
  module, function = target.split(':')
  return getattr(importlib.import_module(module), function)


def rerun_command(workdir: str, argv=None) -> str:
  """The command that continues this run: the same arguments, with the workdir made explicit
  (so it still resumes if the config file is moved or renamed)."""
  argv = sys.argv[1:] if argv is None else argv
  args = [a for a in argv if not (a.startswith('--workdir=') or a == '--workdir')]
  if '--workdir' in argv:  # `--workdir DIR`: drop its value too.
    index = argv.index('--workdir')
    args = argv[:index] + argv[index + 2:]
  return shlex.join(['python', '-m', 'vit_jax.main', *args, f'--workdir={workdir}'])


def peer_lost_message(peer: Optional[int], why: str, *, workdir: str, count: int) -> str:
  which = f'process {peer} of {count}' if peer is not None else f'a process of {count}'
  return (f'error: lost {which} ({why}); checkpoints in {workdir} are kept. '
          f'Restart all {count} processes to resume, this one with: {rerun_command(workdir)}')


def _maybe_supervise() -> None:
  """Each process of an explicit multi-process run (--coordinator_address or
  $JAX_COORDINATOR_ADDRESS) trains in a child process, so that JAX's abort when process 0 is
  lost ends it with the project's line and exit 75 (`training.supervisor`)."""
  from vit_jax.training import supervisor  # pylint: disable=g-import-not-at-top
  address = _COORDINATOR.value or os.environ.get('JAX_COORDINATOR_ADDRESS')
  if not supervisor.wanted(bool(address)):
    return
  count = _NUM_PROCESSES.value or int(os.environ.get('JAX_NUM_PROCESSES', 0)) or None
  me = _PROCESS_ID.value if _PROCESS_ID.value is not None else os.environ.get('JAX_PROCESS_ID')
  workdir = command_workdir()
  supervisor.fork_supervised(
      lambda: os.path.join(workdir, f'jax_abort.process{me}.log'),
      functools.partial(peer_lost_message, workdir=workdir, count=count))


def peer_failed_message(peer: int, line: str, *, workdir: str, count: int) -> str:
  return (f'error: process {peer} of {count} stopped with an error ({line}); this one stops too. '
          f'Checkpoints in {workdir} are kept: fix it and restart all {count} processes.')


def stopped_at(result: Dict[str, Any]) -> Any:
  """The step at which a (stage of a) run stopped with work left, or None when it finished."""
  if 'stopped_at' in result:
    return result['stopped_at']
  for stage in ('finetune', 'pretrain'):  # pretrain_then_finetune: {'pretrain': ..., ...}.
    if isinstance(result.get(stage), dict) and 'stopped_at' in result[stage]:
      return result[stage]['stopped_at']
  return None


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  _maybe_supervise()  # Before JAX starts: the parent only waits.
  from vit_jax.training import parallel  # Imported after flag parsing: importing jax is slow.
  parallel.maybe_initialize_distributed(_COORDINATOR.value, _NUM_PROCESSES.value,
                                        _PROCESS_ID.value, _PEER_TIMEOUT.value)
  import jax
  for handler in python_logging.getLogger().handlers:
    handler.addFilter(QuietLibraries())
  workdir = command_workdir()
  watchdog = parallel.PeerWatchdog(
      _PEER_TIMEOUT.value,
      functools.partial(peer_lost_message, workdir=workdir, count=jax.process_count()),
      functools.partial(peer_failed_message, workdir=workdir, count=jax.process_count())).start()
  config, log, before = flags.FLAGS.config, None, None
  if jax.process_index() == 0:
    print(f'Run directory: {workdir} (rerunning the same command resumes it)', flush=True)
  try:
    check_inputs(config, workdir)  # Before the log file: a refused rerun changes nothing.
    if jax.process_index() == 0:
      before, log = list_workdir(workdir), add_file_logger(workdir)
    logging.info('Workdir: %s\nConfig:\n%s', workdir, config)
    result = get_trainer(config.trainer)(config, workdir)
    watchdog.stop()
  except (ValueError, FileNotFoundError, PermissionError) as e:
    # User errors (bad config, missing data or checkpoint): one line, traceback to the log.
    logging.debug('%s', traceback.format_exc())
    message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    print(f'error: {message}', file=sys.stderr)
    # Refused before it started (checks run before step 1): the run directory is as it was.
    if log and not undo_refused_run(workdir, before, log):
      print(f'(details in {os.path.join(workdir, LOG_FILE)}; run directory {workdir})',
            file=sys.stderr)
    _exit_failed(watchdog, message)
  except Exception as e:
    logging.debug('%s', traceback.format_exc())
    if jax.process_count() == 1:
      raise
    # A peer lost mid-collective (gloo's 'Connection closed by peer'): its one line and exit 75.
    # Otherwise the peers are told, then the traceback.
    watchdog.fail(f'{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ""}')
    traceback.print_exc()
    parallel.exit_now(1)
  logging.info('Result: %s', result)
  step = stopped_at(result)
  if step is not None:
    print(f'Stopped at step {step} by SIGTERM; checkpoint saved in {workdir}. To continue: '
          f'{rerun_command(workdir)}', file=sys.stderr)
    _exit_done(EXIT_STOPPED)
  print(f'Done. Results: {result}\nWorkdir: {workdir}')
  _exit_done(0)


def _exit_done(code: int) -> None:
  """Ends a run whose output is complete (checkpoints, export, logs) at once: with several
  processes after JAX's shutdown barrier (process 0 holds the coordination service that the
  others use until then), and without the interpreter's teardown, whose destruction of
  TensorFlow's and JAX's objects took 5-20 s after a SIGTERM's checkpoint (2 vCPUs, 2026-11-29):
  a scheduler's grace period after SIGTERM is for the checkpoint."""
  import jax
  if jax.process_count() > 1:
    try:
      jax.distributed.shutdown()
    except Exception as e:  # A peer lost after this one finished: this one's results stand.
      logging.warning('JAX distributed shutdown failed: %s', str(e).strip()[:300])
  from vit_jax.training import parallel
  parallel.exit_now(code)


def _exit_failed(watchdog: Any, message: str) -> None:
  """Exit 1 after a user error; with several processes the others are told first and this one
  skips JAX's shutdown barrier (they will not reach it), so none waits for a peer that left."""
  import jax
  if jax.process_count() == 1:
    sys.exit(1)
  watchdog.fail(message)
  from vit_jax.training import parallel
  parallel.exit_now(1)


def run() -> None:
  """`app.run(main)`, with a one-line error for overrides of fields the config does not have."""
  try:
    app.run(main)
  except (AttributeError, KeyError) as e:
    if flags.FLAGS.is_parsed():
      raise  # Not a flag problem: keep the traceback.
    field = str(e).strip('\'"')
    print(f'error: unknown config field {field!r} in a --config.* override; check the field names '
          'in the config file (and its get_config docstring).', file=sys.stderr)
    sys.exit(2)


if __name__ == '__main__':
  run()
