#!/usr/bin/env python3
"""Stands in for `python ARGS` started by a forked command (tests/mocked_run.py, "fork_children").

The study runner starts each run as `sys.executable -m vit_jax.main ...`; in a forked command
`sys.executable` is this script, which asks the fork server (its unix socket is named in the
environment) to fork the same command after the heavy imports, with this process's cwd,
environment, stdin, stdout and stderr, and then is that command for whoever started it: SIGTERM,
SIGINT and SIGHUP are passed on, and it exits as the command did (by the same signal, or with
the same status). Standard library only: it starts in milliseconds.
"""

import json
import os
import signal
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import forked  # noqa: E402  # The request format and the socket's variable; no heavy imports.


def read_reply(replies):
  """The fork server's next JSON line; exits, saying why, if it went away or refused."""
  line = replies.readline()
  if not line:
    sys.exit('tests/forked_python.py: the fork server went away')
  reply = json.loads(line)
  if 'error' in reply:
    sys.exit(f'tests/forked_python.py: the fork server refused the request: {reply["error"]}')
  return reply


def main():
  connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
  connection.connect(os.environ[forked.SOCKET_VARIABLE])
  request = dict(forked.request(sys.argv[1:]), cwd=os.getcwd(), env=dict(os.environ))
  socket.send_fds(connection, [json.dumps(request).encode() + b'\n'], [0, 1, 2])
  replies = connection.makefile('r')
  pid = read_reply(replies)['started']
  for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(signum, lambda signum, frame: os.kill(pid, signum))
  rc = read_reply(replies)['rc']
  if rc < 0:  # Ended by a signal: end by the same one.
    signal.signal(-rc, signal.SIG_DFL)
    os.kill(os.getpid(), -rc)
  sys.exit(rc)


if __name__ == '__main__':
  main()
