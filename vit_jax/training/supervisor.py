"""A parent process for each process of a multi-process run: JAX's abort becomes the project's line.

When process 0 of a multi-process run dies, its coordination service goes with it, and jaxlib's
client in every other process ends that process at once from C++ (SIGABRT, exit 134, a
"Check failure stack trace" and a Python thread dump). The handler cannot be replaced from Python
(a callback passed to the client crashes with `std::bad_cast`, jaxlib 0.10), and it usually wins
the race against the watchdog's own line (`parallel.PeerWatchdog`). So the command's process
forks before JAX starts: the child runs the training, the parent waits for it, relays its
stderr, forwards SIGTERM and SIGHUP, and, when the child is ended by such an abort, keeps the
abort report in a file and prints one line instead (exit `EXIT_PEER_LOST` when a process was
lost). The child dies with the parent (PR_SET_PDEATHSIG): a kill -9 of the command's pid ends
the training too, so the other processes see it lost.

Linux only (the signal the child gets when its parent dies is Linux's); elsewhere, and for single
processes, nothing changes.
"""

import ctypes
import os
import re
import select
import signal
import sys
import time
from typing import Callable, Optional, Tuple

# Set in the child: it does not fork again.
CHILD_ENV = 'VIT_JAX_SUPERVISED_CHILD'
# sysexits' EX_TEMPFAIL: rerun the same command (here, not in `parallel`: no JAX import).
EXIT_PEER_LOST = 75
_PR_SET_PDEATHSIG = 1
# The first line of an abort's report: a glog FATAL line ("F1129 16:35:12.744135 ..."), absl's
# check failure, or Python's faulthandler.
_ABORT_START = re.compile(rb'^(F\d{4} \d\d:\d\d:\d\d|\*\*\* Check failure|Fatal Python error)')
# A glog warning or error line (jaxlib's C++ and absl's Python logging share the format), and
# any glog line.
_WARNING = re.compile(rb'^[WE]\d{4} \d\d:\d\d:\d\d')
_LOG_LINE = re.compile(rb'^[IWEF]\d{4} \d\d:\d\d:\d\d')
# What jaxlib's coordination client says when it ends the process because the run lost a process.
_DISTRIBUTED = (b'JAX distributed service detected fatal errors', b'coordination service')
_LEADER_LOST = (b'leader task', b'Failed to send RPC to coordination service')
_TASK = re.compile(rb'/task:(\d+)')


def wanted(multi_process: bool) -> bool:
  """Whether this process should fork a supervised child: a multi-process run on Linux, not
  already the child."""
  return multi_process and sys.platform.startswith('linux') and not os.environ.get(CHILD_ENV)


def lost_peer(report: bytes) -> Tuple[bool, Optional[int]]:
  """Whether an abort `report` is the coordination service's verdict that the run lost a
  process, and which: 0 when the coordinator (JAX's "leader task") is unreachable, the task JAX
  names otherwise, None when it names none."""
  if not any(marker in report for marker in _DISTRIBUTED):
    return False, None
  if any(marker in report for marker in _LEADER_LOST):
    return True, 0
  task = _TASK.search(report)
  return True, int(task.group(1)) if task else None


def fork_supervised(report_path: Callable[[], str],
                    lost_message: Callable[[int, str], str]) -> None:
  """Forks; returns in the child (which runs the training); the parent never returns.

  Args:
    report_path: Where the parent keeps an abort's report (called only after one).
    lost_message: The line for a lost process (its index, or None when JAX names none; why),
      as the watchdog prints it.
  """
  read_fd, write_fd = os.pipe()
  parent = os.getpid()
  pid = os.fork()
  if pid == 0:
    os.environ[CHILD_ENV] = '1'
    _die_with_parent(parent)
    os.close(read_fd)
    os.dup2(write_fd, 2)  # sys.stderr and absl's handler write to fd 2: now the pipe.
    os.close(write_fd)
    return
  os.close(write_fd)
  for signum in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(signum, lambda signum, frame: _forward(pid, signum))
  # Ctrl-C reaches the whole foreground group, the child included: the parent waits for it.
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  report, status, said = _relay(read_fd, pid)
  os._exit(_exit_code(status, report, report_path, lost_message, said))


def _forward(pid: int, signum: int) -> None:
  try:
    os.kill(pid, signum)
  except ProcessLookupError:  # The child has just exited: its status says the rest.
    pass


def _die_with_parent(parent: int) -> None:
  libc = ctypes.CDLL(None, use_errno=True)
  libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
  if os.getppid() != parent:  # The parent died before prctl took effect.
    os._exit(128 + signal.SIGKILL)


class _Filter:
  """Sorts the child's stderr lines: to the terminal, or, from the first line of an abort's
  report on, into the report. The warnings and errors jaxlib logs just before it aborts
  (a C++ glog W/E line and its continuation lines) are held up to `HOLD_S`: they join the
  report if the abort follows, else go to the terminal, late by at most that long."""

  HOLD_S = 2.

  def __init__(self):
    self.report, self.said, self.held, self.held_since = b'', False, b'', 0.

  def line(self, line: bytes, now: float) -> None:
    if self.report or _ABORT_START.match(line):
      self.report += self.held + line
      self.held = b''
    elif _WARNING.match(line) or (self.held and not _LOG_LINE.match(line)):
      self.held_since = self.held_since if self.held else now
      self.held += line
    else:
      self.flush()
      self.said = self.said or line.startswith(b'error: ')
      _write(line)

  def tick(self, now: float) -> None:
    if self.held and now - self.held_since > self.HOLD_S:
      self.flush()

  def flush(self) -> None:
    if self.held:
      _write(self.held)
      self.held = b''


def _relay(read_fd: int, pid: int):
  """Copies the child's stderr to ours line by line until it exits, keeping an abort's report
  (`_Filter`). Returns (report, wait status, whether an `error: ` line was relayed)."""
  pending, status, lines = b'', None, _Filter()
  while status is None:
    ready, _, _ = select.select([read_fd], [], [], 0.5)
    chunk = _read(read_fd) if ready else b''
    if not ready or not chunk:  # A grandchild may hold the pipe open: the child's exit decides.
      done, wait_status = os.waitpid(pid, 0 if ready else os.WNOHANG)
      if done:
        status = wait_status
        chunk = _drain(read_fd)
    pending += chunk
    *complete, pending = re.split(rb'(?<=[\n\r])', pending)
    if status is not None:
      complete.append(pending)
    now = time.monotonic()
    for line in complete:
      if line:
        lines.line(line, now)
    lines.tick(now)
  lines.flush()
  return lines.report, status, lines.said


def _read(fd: int) -> bytes:
  try:
    return os.read(fd, 65536)
  except InterruptedError:
    return b''


def _drain(fd: int) -> bytes:
  data = b''
  while select.select([fd], [], [], 0)[0]:
    chunk = _read(fd)
    if not chunk:
      break
    data += chunk
  return data


def _write(data: bytes) -> None:
  os.write(2, data)


def _exit_code(status: int, report: bytes, report_path: Callable[[], str],
               lost_message: Callable[[Optional[int], str], str], said: bool) -> int:
  """The child's exit code; for an abort with a report, the report is kept and one line said
  (none if the child said its error line before the abort: the watchdog won the race)."""
  code = os.waitstatus_to_exitcode(status)
  if code >= 0 or not report:
    return code if code >= 0 else 128 - code
  path = _keep(report, report_path)
  lost, peer = lost_peer(report)
  if said:
    _write(f'(JAX\'s abort report: {path})\n'.encode())
    return EXIT_PEER_LOST if lost else 128 - code
  if not lost:
    first = report.splitlines()[0].decode(errors='replace').strip()
    _write(f'error: this process was aborted: {first[:300]} (its report: {path})\n'.encode())
    return 128 - code
  why = {0: 'the coordinator stopped answering', None: 'JAX\'s coordination service ended '
         'this process'}.get(peer, 'JAX\'s coordination service declared it dead')
  line = lost_message(peer, why)
  _write(f'{line} (JAX\'s abort report: {path})\n'.encode())
  return EXIT_PEER_LOST


def _keep(report: bytes, report_path: Callable[[], str]) -> str:
  try:
    path = report_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
  except OSError:
    import tempfile  # pylint: disable=g-import-not-at-top
    path = os.path.join(tempfile.gettempdir(), os.path.basename(report_path()))
  with open(path, 'wb') as f:
    f.write(report)
  return path
