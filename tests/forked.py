"""`python ARGS` for the tests, forked from a process that has imported the heavy libraries.

A test that starts `python -m vit_jax.main ...` (or `python -c CODE`, `python SCRIPT`, or
`python tests/mocked_run.py MODULE ...`) pays ~4 s of CPU for importing TensorFlow, TFDS, JAX,
Flax, optax and orbax before its command does anything; a suite that starts ~100 of them pays
minutes. `popen` and `run` start the same command as a child of `tests/mocked_run.py --serve`,
forked after those imports: the child gets the command's cwd, environment, argv, its own
stdout/stderr and exit status, and can be signalled or killed by pid; nothing of this package is
imported before the command imports it, and JAX starts its backend in the child (reading
XLA_FLAGS then). One server per environment (the variables that the pre-imported libraries may
read at import must be the command's): a command with other ones gets its own server.
"""

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MOCKED_RUN = os.path.join(ROOT, 'tests', 'mocked_run.py')
# Read when used (in the child), not when the server imports: they do not need a server apiece.
READ_AT_RUN_TIME = ('PYTEST_CURRENT_TEST', 'VIT_JAX_CACHE', 'XLA_FLAGS')
# Names the fork server's unix socket in its commands' environment (tests/forked_python.py).
SOCKET_VARIABLE = 'VIT_JAX_TESTS_FORK_SOCKET'
FORKED_PYTHON = os.path.join(ROOT, 'tests', 'forked_python.py')
# XLA:CPU compiles the suite's tiny programs 2-3x sooner with its loop emitters than with its
# fusion emitters (the default): in a 2-step `:runlocal` run, the train step of a ViT 2.5 → 0.9 s,
# of a ResNet-50 7.8 → 4.4 s, the same losses. tests/conftest.py sets it for the test processes
# and the commands they start.
COMPILE_FLAGS = '--xla_cpu_use_fusion_emitters=false'


def xla_flags(devices: int) -> str:
  """XLA_FLAGS for a command of the suite on `devices` CPU devices."""
  return f'{COMPILE_FLAGS} --xla_force_host_platform_device_count={devices}'


class _Server:
  """One `mocked_run.py --serve` and a thread that reads its replies (started pids, exits)."""

  def __init__(self, env):
    self.proc = subprocess.Popen(
        [sys.executable, MOCKED_RUN, '--serve'], cwd=ROOT, env=env, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    self.lock = threading.Lock()  # One start request at a time.
    self.changed = threading.Condition()
    self.started, self.exits = [], {}
    threading.Thread(target=self._read, daemon=True).start()

  def _read(self):
    for line in self.proc.stdout:
      reply = json.loads(line)
      with self.changed:
        if 'started' in reply:
          self.started.append(reply['started'])
        else:
          self.exits[reply['pid']] = reply['rc']
        self.changed.notify_all()
    with self.changed:
      self.started.append(None)  # The server is gone.
      self.changed.notify_all()

  def start(self, request):
    with self.lock:
      self.proc.stdin.write(json.dumps(request) + '\n')
      self.proc.stdin.flush()
      with self.changed:
        self.changed.wait_for(lambda: self.started, timeout=600)
        pid = self.started.pop(0) if self.started else None
    assert pid, f'tests/mocked_run.py --serve did not start {request}'
    return pid

  def wait(self, pid, timeout):
    with self.changed:
      self.changed.wait_for(lambda: pid in self.exits or None in self.started, timeout)
      return self.exits.get(pid)

  def close(self):
    if self.proc.poll() is None:
      os.killpg(self.proc.pid, signal.SIGKILL)
    self.proc.wait()


_SERVERS = {}


def _server(env):
  key = tuple(sorted((k, v) for k, v in env.items() if k not in READ_AT_RUN_TIME))
  if key not in _SERVERS:
    _SERVERS[key] = _Server(env)
  return _SERVERS[key]


@atexit.register
def _close_servers():
  while _SERVERS:
    _SERVERS.popitem()[1].close()


def request(args):
  """What `python *args` runs, as `mocked_run.serve` reads it."""
  args = [str(a) for a in args]
  if args[0] == '-m':
    return dict(module=args[1], args=args[2:])
  if args[0] == '-c':
    return dict(code=args[1], args=args[2:])
  if os.path.abspath(args[0]) == MOCKED_RUN:
    return dict(module=args[1], args=args[2:], mocked=True)
  return dict(script=os.path.abspath(args[0]), args=args[1:])


class Process:
  """The part of `subprocess.Popen` the tests use, for a forked command (text output)."""

  def __init__(self, args, *, cwd, env, merge_stderr, fork_children):
    self.args, self.returncode, self._output = args, None, None
    self._dir = tempfile.mkdtemp(prefix='forked_')
    self._out = os.path.join(self._dir, 'stdout')
    self._err = self._out if merge_stderr else os.path.join(self._dir, 'stderr')
    env = dict(os.environ if env is None else env)
    self._server = _server(env)
    self.pid = self._server.start(dict(request(args), cwd=str(cwd or os.getcwd()), env=env,
                                       stdout=self._out, stderr=self._err,
                                       fork_children=fork_children))

  def poll(self):
    if self.returncode is None:
      self.returncode = self._server.wait(self.pid, 0)
    return self.returncode

  def wait(self, timeout=None):
    if self.returncode is None:
      self.returncode = self._server.wait(self.pid, timeout)
      if self.returncode is None:
        raise subprocess.TimeoutExpired(self.args, timeout)
    return self.returncode

  def communicate(self, timeout=None):
    """(stdout, stderr) once the command has ended; stderr None when merged into stdout."""
    self.wait(timeout)
    if self._output is None:
      with open(self._out) as f:
        out = f.read()
      err = None
      if self._err != self._out:
        with open(self._err) as f:
          err = f.read()
      self._output = out, err
      shutil.rmtree(self._dir, ignore_errors=True)
    return self._output

  def send_signal(self, sig):
    if self.poll() is None:
      os.kill(self.pid, sig)

  def kill(self):
    self.send_signal(signal.SIGKILL)


def popen(args, *, cwd=None, env=None, merge_stderr=False, fork_children=False):
  """`subprocess.Popen([sys.executable, *args], ..., text=True)` with stdout (and stderr, or
  stderr into stdout) captured, forked after the heavy imports. `fork_children`: the command's
  own `sys.executable` subprocesses are forked too (tests/forked_python.py)."""
  return Process(args, cwd=cwd, env=env, merge_stderr=merge_stderr, fork_children=fork_children)


def run(args, *, cwd=None, env=None, timeout=None, fork_children=False):
  """`subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=...)`,
  forked after the heavy imports; on a timeout the command is killed, as `subprocess.run` does."""
  proc = popen(args, cwd=cwd, env=env, fork_children=fork_children)
  try:
    out, err = proc.communicate(timeout)
  except subprocess.TimeoutExpired:
    proc.kill()
    proc.wait()
    raise
  return subprocess.CompletedProcess([sys.executable, *args], proc.returncode, out, err)
