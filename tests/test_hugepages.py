"""vit_jax.hugepages: when vit_jax.main re-executes with huge pages, and that it does."""

import os
import subprocess
import sys
import textwrap

import pytest

from vit_jax import hugepages

GLIBC = (2, 36)


def test_adds_the_tunable_in_madvise_mode():
  env = hugepages.environment_with_hugepages({'PATH': '/bin'}, 'madvise', GLIBC)
  assert env == {'PATH': '/bin', 'GLIBC_TUNABLES': 'glibc.malloc.hugetlb=1'}


def test_keeps_other_tunables():
  env = hugepages.environment_with_hugepages(
      {'GLIBC_TUNABLES': 'glibc.malloc.arena_max=2'}, 'madvise', GLIBC)
  assert env['GLIBC_TUNABLES'] == 'glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1'
  assert hugepages.environment_without_hugepages(env) == {
      'GLIBC_TUNABLES': 'glibc.malloc.arena_max=2'}
  assert hugepages.environment_without_hugepages(
      {'GLIBC_TUNABLES': 'glibc.malloc.hugetlb=1', 'A': 'b'}) == {'A': 'b'}


@pytest.mark.parametrize('environ, mode, libc', [
    ({'GLIBC_TUNABLES': 'glibc.malloc.hugetlb=0'}, 'madvise', GLIBC),  # The user chose.
    ({'GLIBC_TUNABLES': 'glibc.malloc.hugetlb=1'}, 'madvise', GLIBC),  # Already re-executed.
    ({'VIT_JAX_HUGEPAGES': '0'}, 'madvise', GLIBC),  # Opted out.
    ({}, 'always', GLIBC),  # Huge pages without asking.
    ({}, 'never', GLIBC),  # None at all.
    ({}, None, GLIBC),  # No THP (not Linux, or no sysfs).
    ({}, 'madvise', (2, 34)),  # Too old for the tunable.
    ({}, 'madvise', None),  # Not glibc.
])
def test_leaves_the_environment_alone_when_it_would_not_help(environ, mode, libc):
  assert hugepages.environment_with_hugepages(environ, mode, libc) is None


def test_thp_mode_reads_the_bracketed_choice(tmp_path):
  path = tmp_path / 'enabled'
  path.write_text('always [madvise] never\n')
  assert hugepages.thp_mode(str(path)) == 'madvise'
  assert hugepages.thp_mode(str(tmp_path / 'missing')) is None


def test_reexec_keeps_pid_and_arguments_and_sets_the_tunable_once(tmp_path):
  if hugepages.environment_with_hugepages({}, hugepages.thp_mode(),
                                          hugepages.glibc_version()) is None:
    pytest.skip('this machine has no THP madvise mode or no glibc >= 2.35')
  script = tmp_path / 'probe.py'
  script.write_text(textwrap.dedent('''
      import os, sys
      print('start', os.getpid(), os.environ.get('GLIBC_TUNABLES', ''), flush=True)
      from vit_jax import hugepages
      hugepages.reexec_with_hugepages()
      print('after', os.getpid(), os.environ['GLIBC_TUNABLES'], sys.argv[1:], flush=True)
  '''))
  env = {k: v for k, v in os.environ.items() if k not in ('GLIBC_TUNABLES', 'VIT_JAX_HUGEPAGES')}
  env['PYTHONPATH'] = os.pathsep.join([os.getcwd(), env.get('PYTHONPATH', '')])
  out = subprocess.run([sys.executable, str(script), '--flag=1', 'x'], env=env, check=True,
                       capture_output=True, text=True).stdout.split('\n')
  first, second, after = out[0].split(), out[1].split(), out[2]
  assert first[:2] == ['start', second[1]] and len(first) == 2  # Same PID, no tunable yet.
  assert second[2] == 'glibc.malloc.hugetlb=1'  # Re-executed with it, and only once:
  assert after.startswith(f'after {first[1]} glibc.malloc.hugetlb=1 ')
  assert after.endswith("['--flag=1', 'x']")
  assert len([line for line in out if line]) == 3
