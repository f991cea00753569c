"""`training.supervisor`: the parent that turns jaxlib's abort of a lost run into one line.

The child here plays the training process: it writes to stderr, then ends as jaxlib ends a
process whose coordinator is gone (the report below is jaxlib 0.10.2's, seen on 2026-11-29 when
process 0 of 2 was killed), as another abort, by an exit code, or by a forwarded SIGTERM. The
real 2-process case: test_distributed.py::test_a_killed_process_ends_the_other_with_one_line.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from vit_jax.training import supervisor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEADER_LOST = (
    'E1129 16:35:12.744128   15472 coordination_service_agent.cc:289] Polled an error from '
    'coordination service (this can be an error from this or another task).\n'
    'F1129 16:35:12.744135   15472 client.h:80] Terminating process because the JAX distributed '
    'service detected fatal errors. This most likely indicates that another task died; see the '
    'other task logs for more details. absl::Status: UNAVAILABLE: Failed to send RPC to '
    'coordination service. Either the leader task was preempted/died/restarted unexpectedly or '
    'this task is experiencing network issues.\n'
    '*** Check failure stack trace: ***\n'
    '    @     0x7f9bc9840634  absl::lts_20260107::log_internal::LogMessage::SendToLog()\n')
HEARTBEATS = (
    'F1129 16:40:01.000001   15472 client.h:80] Terminating process because the JAX distributed '
    'service detected fatal errors. absl::Status: UNAVAILABLE: Task /job:jax_worker/replica:0/'
    'task:3 heartbeat timeout. This indicates that the remote task has failed, got preempted, or '
    'crashed unexpectedly.\n')
CHILD = '''
import os, signal, sys, time
from vit_jax.training import supervisor
report, how, ready = sys.argv[1:]
supervisor.fork_supervised(lambda: report, lambda peer, why: f'error: lost process {peer} ({why})')
print('child: training', file=sys.stderr, flush=True)
if how == 'exit':
  print('W1129 12:00:00.0 x.cc:1] a warning', file=sys.stderr, flush=True)
  sys.exit(3)
if how == 'sigterm':
  signal.signal(signal.SIGTERM, lambda *_: (print('child: SIGTERM', file=sys.stderr, flush=True),
                                            os._exit(143)))
  open(ready, 'w').close()
  time.sleep(60)
sys.stderr.write({'leader': %r, 'heartbeats': %r, 'other': 'F1129 12:00:00.0 x.cc:1] bad\\n',
                  'said': 'error: lost process 0 (said first)\\n' + %r}[how])
sys.stderr.flush()
os.abort()
''' % (LEADER_LOST, HEARTBEATS, LEADER_LOST)


def run_child(tmp_path, how, signal_parent=False):
  env = dict(os.environ, PYTHONPATH=ROOT)
  env.pop(supervisor.CHILD_ENV, None)
  report, ready = str(tmp_path / 'sub' / 'report.log'), str(tmp_path / 'ready')
  proc = subprocess.Popen([sys.executable, '-c', CHILD, report, how, ready], env=env,
                          stderr=subprocess.PIPE, text=True)
  if signal_parent:
    deadline = time.time() + 60
    while not os.path.exists(ready):
      assert time.time() < deadline and proc.poll() is None
      time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
  err = proc.communicate(timeout=60)[1]
  return proc.returncode, err, report


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='The supervisor is Linux-only.')
@pytest.mark.parametrize('how,peer,why', [
    ('leader', 0, 'the coordinator stopped answering'),
    ('heartbeats', 3, "JAX's coordination service declared it dead")])
def test_jaxlibs_abort_of_a_lost_run_becomes_one_line_and_exit_75(tmp_path, how, peer, why):
  code, err, report = run_child(tmp_path, how)
  assert code == supervisor.EXIT_PEER_LOST, err
  assert err.splitlines() == ['child: training',
                              f"error: lost process {peer} ({why}) (JAX's abort report: {report})"]
  with open(report) as f:  # Kept whole, with the error line jaxlib logged just before.
    assert f.read() == (LEADER_LOST if how == 'leader' else HEARTBEATS)


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='The supervisor is Linux-only.')
def test_other_ends_keep_their_meaning(tmp_path):
  code, err, report = run_child(tmp_path, 'other')  # Not the coordination service: not "lost".
  assert code == 128 + signal.SIGABRT
  assert err.splitlines()[-1] == ('error: this process was aborted: F1129 12:00:00.0 x.cc:1] bad '
                                  f'(its report: {report})')
  code, err, _ = run_child(tmp_path, 'said')  # The watchdog's line came first: no second one.
  assert code == supervisor.EXIT_PEER_LOST
  assert [line for line in err.splitlines() if line.startswith('error:')] == [
      'error: lost process 0 (said first)']
  code, err, _ = run_child(tmp_path, 'exit')  # A warning held for a possible abort is shown.
  assert (code, err.splitlines()) == (3, ['child: training', 'W1129 12:00:00.0 x.cc:1] a warning'])
  code, err, _ = run_child(tmp_path, 'sigterm', signal_parent=True)  # Forwarded to the child.
  assert (code, err.splitlines()) == (143, ['child: training', 'child: SIGTERM'])


def test_no_child_for_single_processes_or_inside_the_child(monkeypatch):
  monkeypatch.delenv(supervisor.CHILD_ENV, raising=False)
  assert not supervisor.wanted(False)
  assert supervisor.wanted(True) == sys.platform.startswith('linux')
  monkeypatch.setenv(supervisor.CHILD_ENV, '1')
  assert not supervisor.wanted(True)


def test_a_held_warning_reaches_the_terminal_if_no_abort_follows(capfd):
  lines = supervisor._Filter()  # pylint: disable=protected-access
  lines.line(b'W1129 12:00:00.0 x.cc:1] slow\n', now=0.)
  lines.line(b'  its continuation\n', now=0.1)
  lines.tick(now=supervisor._Filter.HOLD_S - 0.1)
  assert capfd.readouterr().err == ''
  lines.tick(now=supervisor._Filter.HOLD_S + 0.5)
  assert capfd.readouterr().err == 'W1129 12:00:00.0 x.cc:1] slow\n  its continuation\n'
  lines.line(b'W1129 12:00:01.0 x.cc:1] again\n', now=10.)
  lines.line(b'I1129 12:00:01.1 train.py:1] step 3\n', now=10.1)  # Any other line releases it.
  assert capfd.readouterr().err == ('W1129 12:00:01.0 x.cc:1] again\n'
                                    'I1129 12:00:01.1 train.py:1] step 3\n')
  assert lines.report == b''
