"""Huge pages for malloc: scripts/hugepages.sh (the launcher) and the benchmarks' environment."""

import os
import subprocess
import sys
import textwrap

BENCHMARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'benchmarks')
LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'scripts',
                        'hugepages.sh')
sys.path.insert(0, BENCHMARKS)
import hugepages  # noqa: E402  # benchmarks/hugepages.py, not part of the package.


def test_adds_the_tunable():
  env = hugepages.with_hugepages({'PATH': '/bin'})
  assert env == {'PATH': '/bin', 'GLIBC_TUNABLES': 'glibc.malloc.hugetlb=1'}
  assert hugepages.active(env) and not hugepages.active({'PATH': '/bin'})


def test_keeps_other_tunables():
  env = hugepages.with_hugepages({'GLIBC_TUNABLES': 'glibc.malloc.arena_max=2'})
  assert env['GLIBC_TUNABLES'] == 'glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1'
  assert hugepages.without_hugepages(env) == {'GLIBC_TUNABLES': 'glibc.malloc.arena_max=2'}
  assert hugepages.without_hugepages(
      {'GLIBC_TUNABLES': 'glibc.malloc.hugetlb=1', 'A': 'b'}) == {'A': 'b'}


def test_keeps_the_users_choice():
  environ = {'GLIBC_TUNABLES': 'glibc.malloc.hugetlb=0'}
  assert hugepages.with_hugepages(environ) == environ


def run_launcher(tmp_path, tunables=None, exit_code=0):
  script = tmp_path / 'probe.py'
  script.write_text(textwrap.dedent(f'''
      import os, sys
      print(os.environ.get('GLIBC_TUNABLES', ''), sys.argv[1:], flush=True)
      sys.exit({exit_code})
  '''))
  env = {k: v for k, v in os.environ.items() if k != 'GLIBC_TUNABLES'}
  if tunables is not None:
    env['GLIBC_TUNABLES'] = tunables
  return subprocess.run([LAUNCHER, sys.executable, str(script), '--flag=1', 'a b'], env=env,
                        capture_output=True, text=True)


def test_launcher_runs_the_command_with_the_tunable(tmp_path):
  done = run_launcher(tmp_path)
  assert done.returncode == 0, done.stderr
  assert done.stdout == "glibc.malloc.hugetlb=1 ['--flag=1', 'a b']\n"


def test_launcher_keeps_tunables_and_exit_code(tmp_path):
  done = run_launcher(tmp_path, 'glibc.malloc.arena_max=2', exit_code=143)
  assert done.returncode == 143
  assert done.stdout.split()[0] == 'glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1'
  assert run_launcher(tmp_path, 'glibc.malloc.hugetlb=0').stdout.split()[0] == (
      'glibc.malloc.hugetlb=0')


def test_main_does_not_reexecute_itself(tmp_path):
  """vit_jax.main runs in the process it was started in, with the environment it was given."""
  script = tmp_path / 'probe.py'
  script.write_text(textwrap.dedent('''
      import os, sys
      from vit_jax import main
      sys.argv = ['main', '--helpshort']
      print(os.getpid(), flush=True)
      main.run()
  '''))
  env = {k: v for k, v in os.environ.items() if k != 'GLIBC_TUNABLES'}
  env['PYTHONPATH'] = os.pathsep.join([os.getcwd(), env.get('PYTHONPATH', '')])
  done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
  assert done.stdout.count('\n') >= 1 and 'GLIBC_TUNABLES' not in done.stdout
  assert len([line for line in done.stdout.splitlines() if line.strip().isdigit()]) == 1
