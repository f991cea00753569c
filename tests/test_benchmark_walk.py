"""benchmarks/static_walk.py on a made-up package: the files it enters and the climbs it counts."""

import os
import sys
import textwrap

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'benchmarks'))
import static_walk  # noqa: E402  # A script in benchmarks/, not part of the package.

LAYERS = """\
[importlinter]
root_packages = pkg

[importlinter:contract:layers]
name = top over mid over low
type = layers
layers =
    pkg.top
    pkg.mid | pkg.helpers
    pkg.low
"""

MODULES = {
    '__init__.py': '',
    'top.py': """\
        import pkg.low as low_alias
        from pkg import helpers, mid
        from pkg.low import helper
        from pkg.mid import Box

        def entry(config):
          model = config.model
          mid.run(model)                # config.model: followed into mid.py
          helper(x=config['pp'])        # an element, by keyword: low.py
          low_alias.untouched(3)        # no config: not followed
          mid.loop(Box(config))         # an object whose .config is it
          made = build()
          helpers.same_layer(made.config)  # any object's .config: top -> helpers
          unrelated = len(config)
          return unrelated

        def build():
          return None
        """,
    'mid.py': """\
        from . import helpers
        from pkg import low

        class Box:
          def __init__(self, config):
            self.config = config

        def run(cfg):
          part, other = cfg.get('a'), 1
          low.leaf(part)
          helpers.same_layer(cfg)       # same layer: entered, not a climb
          low.untouched(other)

        def loop(box):
          low.leaf(box.config)
        """,
    'helpers.py': """\
        def same_layer(c):
          return c
        """,
    'low.py': """\
        def leaf(c):
          return c

        def helper(x):
          return x

        def untouched(n):
          return n
        """,
    'side.py': """\
        from pkg import low

        def never_called(config):
          low.leaf(config)
        """,
}


def write(root, modules=MODULES):
  os.makedirs(os.path.join(root, 'pkg'))
  for name, text in modules.items():
    with open(os.path.join(root, 'pkg', name), 'w') as f:
      f.write(textwrap.dedent(text))
  with open(os.path.join(root, '.importlinter'), 'w') as f:
    f.write(LAYERS)


def test_static_walk_counts(tmp_path):
  write(str(tmp_path))
  result = static_walk.measure(str(tmp_path), 'pkg.top.entry')
  assert result['files'] == ['pkg/helpers.py', 'pkg/low.py', 'pkg/mid.py', 'pkg/top.py']
  assert result['climbs'] == [('pkg/mid.py', 'pkg/low.py'), ('pkg/top.py', 'pkg/helpers.py'),
                              ('pkg/top.py', 'pkg/low.py'), ('pkg/top.py', 'pkg/mid.py')]
  assert ('pkg/mid.py', 'pkg/helpers.py') in result['edges'] and not result['upward']


def test_static_walk_not_passed_on(tmp_path):
  modules = dict(MODULES, **{'top.py': """\
      from pkg import low, mid

      def entry(config):
        low.untouched(len(config))  # a value computed from config by a builtin: not followed
        mid.run(1)
      """})
  write(str(tmp_path), modules)
  result = static_walk.measure(str(tmp_path), 'pkg.top.entry')
  assert result['files'] == ['pkg/top.py'] and result['climbs'] == []


def test_static_walk_main_prints(tmp_path, capsys):
  write(str(tmp_path))
  assert static_walk.main(['--root', str(tmp_path), '--entry', 'pkg.top.entry']) == 0
  out = capsys.readouterr().out
  assert 'files entered: 4' in out and 'climbs back up: 4' in out and '  pkg/side.py' not in out


def test_this_tree_meets_the_target():
  """Issue 61, point 6: the trainer reads its config once (`training/settings.py`) and the
  layers below take settings, so config enters at most 20 files and climbs back up at most 10
  times (docs/architecture.md keeps the figures)."""
  root = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
  result = static_walk.measure(root)
  assert len(result['files']) <= 20, result['files']
  assert len(result['climbs']) <= 10, result['climbs']
  assert not result['upward'], result['upward']
