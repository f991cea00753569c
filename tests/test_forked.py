"""The suite's forked commands (tests/forked.py) and their forked children (forked_python.py)."""

import json
import os
import signal
import sys
import textwrap

import forked


def run_forked(code, tmp_path, **kwargs):
  return forked.run(['-c', textwrap.dedent(code)], cwd=tmp_path, timeout=120, **kwargs)


def test_a_forked_commands_python_subprocess_is_forked_and_is_that_command(tmp_path):
  """The child sees the cwd, environment and stdin it was given, writes where its parent
  said, and its exit status is the stand-in's."""
  code = """
      import json, os, subprocess, sys
      env = dict(os.environ, CHILD_VALUE='given')
      child = ("import os, sys; print(os.getcwd(), os.environ['CHILD_VALUE'], sys.stdin.read(), "
               "'tensorflow' in sys.modules); print('to stderr', file=sys.stderr); sys.exit(3)")
      os.mkdir('sub')
      proc = subprocess.run([sys.executable, '-c', child], cwd='sub', env=env, input='typed',
                            capture_output=True, text=True)
      print(json.dumps([sys.executable, proc.returncode, proc.stdout, proc.stderr]))
  """
  proc = run_forked(code, tmp_path, fork_children=True)
  assert proc.returncode == 0, proc.stderr
  python, rc, out, err = json.loads(proc.stdout)
  assert python == forked.FORKED_PYTHON and rc == 3
  # Forked after the heavy imports (TensorFlow is there before the child imports anything).
  assert out == f'{tmp_path / "sub"} given typed True\n' and err == 'to stderr\n'


def test_signals_to_the_stand_in_reach_the_child_and_it_ends_as_the_child_did(tmp_path):
  code = """
      import os, signal, subprocess, sys, time
      handled = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(7));"
                 "print('ready', flush=True); time.sleep(60)")
      unhandled = "import time; print('ready', flush=True); time.sleep(60)"
      for child in (handled, unhandled):
        proc = subprocess.Popen([sys.executable, '-c', child], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline() == 'ready\\n'
        proc.send_signal(signal.SIGTERM)
        print(proc.wait(timeout=30))
  """
  proc = run_forked(code, tmp_path, fork_children=True)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.split() == ['7', str(-signal.SIGTERM)]


def test_without_fork_children_a_commands_python_is_pythons(tmp_path):
  proc = run_forked('import sys; print(sys.executable)', tmp_path)
  assert proc.stdout.strip() == sys.executable
  assert os.path.realpath(proc.stdout.strip()) != os.path.realpath(forked.FORKED_PYTHON)


def test_a_bad_request_on_the_socket_is_refused_and_the_server_serves_the_next(tmp_path):
  """A request the fork server cannot read (not JSON, not an object, or without its three
  descriptors) gets one error line on its own connection; the next command is forked as before."""
  code = f"""
      import json, os, socket, subprocess, sys
      for payload, fds in ((b'not json\\n', [0, 1, 2]), (b'{{}}\\n', []), (b'[1]\\n', [0, 1, 2])):
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(os.environ[{forked.SOCKET_VARIABLE!r}])
        socket.send_fds(connection, [payload], fds)
        print(json.loads(connection.makefile('r').readline())['error'].split(':')[0])
      print(subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True,
                           text=True).stdout.strip())
  """
  proc = run_forked(code, tmp_path, fork_children=True)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.split() == ['JSONDecodeError', 'ValueError', 'ValueError', '42']
