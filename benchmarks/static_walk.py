"""The static walk of `config` from `vit_jax.train.train_and_evaluate`: files entered, climbs.

  PYTHONPATH=. python benchmarks/static_walk.py                  # this tree
  PYTHONPATH=. python benchmarks/static_walk.py --root /tmp/old  # another tree (git archive)

Reads the source with `ast` (nothing is imported or run, so it measures any commit, and every
path, where benchmarks/config_walk.py traces the one path a run takes). From the entry function
with its parameter `config`, it follows every call that passes config on, and recurses:
- a function carries config in the names bound to it: its parameters that received it, and
  every local assigned from a config expression: a carried name, an attribute, element, slice
  or method result of one (`config.model`, `config['pp']`, `config.get('x')`), any object's
  `.config` (`trainer.config`, as config_walk counts a `Trainer`), or a tuple, `a or b`,
  `a if c else b` or loop over one. Nested functions and lambdas share their parent's names.
- a call passes config on when an argument (positional, keyword, `*`, `**`) is a config
  expression, or is an object the callee reads `.config` from. The callee is resolved through
  the module's imports (`from vit_jax.x import y`, `import vit_jax.x as z`, `from vit_jax import
  x` then `x.f`, relative imports, re-exports), `self.method`, and locals whose class is known
  (annotated `x: mod.Class`, or assigned `x = mod.Class(...)`); a class called is its
  `__init__` (a dataclass without one is entered, with nothing to walk). Calls into anything
  outside the package, and calls it cannot resolve statically (a function passed as a value,
  an object of unknown class), are not followed.
Counted:
- files entered: the distinct files of the functions and classes the walk enters (the entry's
  own file included);
- climbs back up: the distinct (caller file, callee file) pairs of calls that pass config on
  from one file into a file in a LOWER layer of .importlinter's `layers` contract (the tree's
  own; a module takes the layer of its longest listed prefix): having followed config down
  there, the reader climbs back up to the caller to go on. Calls within one layer (say
  training/state.py -> training/masked.py) and into unlisted modules are not climbs. Imports
  only point down (import-linter checks it), so every layer change on the walk is such a
  descent and return; a call the other way (a callback, not resolvable statically) would be
  listed apart as `upward`.
The measurement (issue 61, point 6): at most 20 files and 10 climbs. docs/architecture.md
keeps the figures.
"""

import argparse
import ast
import configparser
import dataclasses
import os
import sys
from typing import Dict, FrozenSet, List, Optional, Set, Tuple


@dataclasses.dataclass
class Module:
  """One parsed module: its imports (alias -> ('mod', name) | ('sym', module, name))."""
  name: str
  path: str
  tree: ast.Module
  imports: Dict[str, Tuple[str, ...]]
  external: Set[str]  # Names bound by imports of anything outside the package.


class Package:
  """The modules of one package under `root`, parsed on demand."""

  def __init__(self, root: str, package: str):
    self.root, self.package, self.paths, self._modules = root, package, {}, {}
    for folder, _, names in os.walk(os.path.join(root, package)):
      for file in names:
        if file.endswith('.py'):
          rel = os.path.relpath(os.path.join(folder, file), root)[:-3].split(os.sep)
          if rel[-1] == '__init__':
            rel = rel[:-1]
          self.paths['.'.join(rel)] = os.path.join(folder, file)

  def module(self, name: str) -> Optional[Module]:
    if name not in self.paths:
      return None
    if name not in self._modules:
      path = self.paths[name]
      with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read(), path)
      is_package = os.path.basename(path) == '__init__.py'
      imports, external = {}, set()
      for node in ast.walk(tree):  # Imports inside functions too (lazy imports).
        if isinstance(node, ast.Import):
          for alias in node.names:
            if alias.name.split('.')[0] != self.package:
              external.add(alias.asname or alias.name.split('.')[0])
            elif alias.asname:
              imports[alias.asname] = ('mod', alias.name)
            else:
              imports[self.package] = ('mod', self.package)
        elif isinstance(node, ast.ImportFrom):
          base = node.module or ''
          if node.level:
            parts = name.split('.')[:len(name.split('.')) - node.level + is_package]
            base = '.'.join(parts + ([node.module] if node.module else []))
          for alias in node.names:
            bound = alias.asname or alias.name
            if base.split('.')[0] != self.package:
              external.add(bound)
            elif f'{base}.{alias.name}' in self.paths:
              imports[bound] = ('mod', f'{base}.{alias.name}')
            else:
              imports[bound] = ('sym', base, alias.name)
      self._modules[name] = Module(name, path, tree, imports, external)
    return self._modules[name]

  def lookup(self, module: str, name: str, depth: int = 0):
    """What `name` is in `module`: ('mod', name), (Module, def node) or None."""
    mod = self.module(module)
    if mod is None or depth > 20:
      return None
    for node in mod.tree.body:
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and (
          node.name == name):
        return mod, node
    target = mod.imports.get(name)
    if target is None:
      return ('mod', f'{module}.{name}') if f'{module}.{name}' in self.paths else None
    if target[0] == 'mod':
      return target
    return self.lookup(target[1], target[2], depth + 1)

  def resolve_chain(self, module: str, names: List[str]):
    """`a.b.f` in `module` -> (Module, def node) or None."""
    found = self.lookup(module, names[0])
    for attr in names[1:]:
      if found is None:
        return None
      if found[0] == 'mod':
        sub = f'{found[1]}.{attr}'
        found = ('mod', sub) if sub in self.paths else self.lookup(found[1], attr)
      elif isinstance(found[1], ast.ClassDef):
        found = method(found[0], found[1], attr)
      else:
        return None
    return None if found is None or found[0] == 'mod' else found

  def layers(self) -> List[List[str]]:
    """The `layers` contract of the tree's .importlinter, top first ([] without one)."""
    parser = configparser.ConfigParser()
    parser.read(os.path.join(self.root, '.importlinter'))
    for section in parser.sections():
      if parser[section].get('type', '').strip() == 'layers':
        lines = [line.strip() for line in parser[section]['layers'].splitlines()]
        return [[m.strip() for m in line.replace(':', '|').split('|')] for line in lines if line]
    return []


def method(mod: Module, cls: ast.ClassDef, name: str):
  for node in cls.body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
      return mod, node
  return None


def chain(expr: ast.expr) -> Optional[List[str]]:
  """`a.b.c` -> ['a', 'b', 'c']; None for anything else."""
  names = []
  while isinstance(expr, ast.Attribute):
    names.append(expr.attr)
    expr = expr.value
  if not isinstance(expr, ast.Name):
    return None
  return [expr.id] + names[::-1]


def params(fn) -> List[str]:
  a = fn.args
  return [p.arg for p in a.posonlyargs + a.args]


def reads_config_of(fn, name: str) -> bool:
  """Whether `fn` reads `<name>.config` (an object that carries the config)."""
  return any(isinstance(n, ast.Attribute) and n.attr == 'config' and isinstance(n.value, ast.Name)
             and n.value.id == name for n in ast.walk(fn))


class Walk:
  """The walk from one entry function; `files`, `edges` (caller, callee paths) when done."""

  def __init__(self, package: Package):
    self.package, self.files, self.edges, self._seen = package, set(), set(), set()

  def enter(self, mod: Module, fn, carried: FrozenSet[str], cls=None) -> None:
    self.files.add(mod.path)
    key = (mod.path, fn.lineno, carried)
    if key in self._seen or isinstance(fn, ast.ClassDef):
      return
    self._seen.add(key)
    scope = Scope(mod, fn, set(carried), cls)
    for call in scope.calls():
      self.follow(scope, call)

  def follow(self, scope: 'Scope', call: ast.Call) -> None:
    target = scope.callee(call.func, self.package)
    if target is None:
      return
    mod, node, cls, bound = target
    fn = node
    if isinstance(node, ast.ClassDef):
      cls, init = node, method(mod, node, '__init__')
      fn, bound = (init[1] if init else node), True
    names = params(fn) if not isinstance(fn, ast.ClassDef) else []
    if bound and names:
      names = names[1:]  # self
    carried = set()
    for i, arg in enumerate(call.args):
      if isinstance(arg, ast.Starred):
        if scope.derived(arg.value):
          carried.update(names[i:] + ([fn.args.vararg.arg] if fn.args.vararg else []))
        continue
      name = names[i] if i < len(names) else (fn.args.vararg.arg if not isinstance(
          fn, ast.ClassDef) and fn.args.vararg else None)
      if name and (scope.derived(arg) or reads_config_of(fn, name)):
        carried.add(name)
      elif isinstance(fn, ast.ClassDef) and scope.derived(arg):
        carried.add(f'#{i}')
    for kw in call.keywords:
      if kw.arg is None:
        if scope.derived(kw.value):
          carried.update(names + [a.arg for a in getattr(fn, 'args', ast.arguments(
              kwonlyargs=[])).kwonlyargs])
        continue
      if scope.derived(kw.value) or (not isinstance(fn, ast.ClassDef)
                                     and reads_config_of(fn, kw.arg)):
        carried.add(kw.arg)
    if not carried:
      return
    if mod.path != scope.mod.path:
      self.edges.add((scope.mod.path, mod.path))
    self.enter(mod, fn, frozenset(carried), cls)


class Scope:
  """One function's names that carry config (a fixpoint over its body, nested code included)."""

  def __init__(self, mod: Module, fn, carried: Set[str], cls):
    self.mod, self.fn, self.carried, self.cls = mod, fn, carried, cls
    self.types: Dict[str, List[str]] = {}  # Local name -> dotted class expression.
    args = fn.args
    for a in args.posonlyargs + args.args + args.kwonlyargs:
      if a.annotation is not None and chain(a.annotation):
        self.types[a.arg] = chain(a.annotation)
    for node in ast.walk(fn):
      if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
        for t in node.targets:
          if isinstance(t, ast.Name) and chain(node.value.func):
            self.types.setdefault(t.id, chain(node.value.func))
    changed = True
    while changed:
      before = len(self.carried)
      for node in ast.walk(fn):
        for target, value in assignments(node):
          self.bind(target, value)
      changed = len(self.carried) != before

  def bind(self, target: ast.expr, value: Optional[ast.expr]) -> None:
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
        and len(target.elts) == len(value.elts):
      for t, v in zip(target.elts, value.elts):
        self.bind(t, v)
    elif value is not None and self.derived(value):
      for n in ast.walk(target):
        if isinstance(n, ast.Name):
          self.carried.add(n.id)

  def derived(self, expr: ast.expr) -> bool:
    """Whether `expr` is config, a part of it, or an object's `.config`."""
    if isinstance(expr, ast.Name):
      return expr.id in self.carried
    if isinstance(expr, ast.Attribute):
      base = chain(expr.value)
      if expr.attr == 'config' and not (base and base[0] in self.mod.external):
        return True  # trainer.config; not jax.config or tf.config.
      return self.derived(expr.value)
    if isinstance(expr, (ast.Subscript, ast.Starred)):
      return self.derived(expr.value)
    if isinstance(expr, ast.Call):
      return isinstance(expr.func, ast.Attribute) and self.derived(expr.func.value)
    if isinstance(expr, ast.IfExp):
      return self.derived(expr.body) or self.derived(expr.orelse)
    if isinstance(expr, ast.BoolOp):
      return any(self.derived(v) for v in expr.values)
    if isinstance(expr, (ast.Tuple, ast.List)):
      return any(self.derived(v) for v in expr.elts)
    if isinstance(expr, ast.NamedExpr):
      return self.derived(expr.value)
    return False

  def calls(self) -> List[ast.Call]:
    return [n for n in ast.walk(self.fn) if isinstance(n, ast.Call)]

  def callee(self, func: ast.expr, package: Package):
    """(Module, def node, class or None, called on an instance) of a call, or None."""
    names = chain(func)
    if names is None:
      return None
    if len(names) == 2 and names[0] in ('self', 'cls') and self.cls is not None:
      found = method(self.mod, self.cls, names[1])
      return found and (found[0], found[1], self.cls, True)
    if len(names) == 2 and names[0] in self.types:
      cls = package.resolve_chain(self.mod.name, self.types[names[0]])
      if cls and isinstance(cls[1], ast.ClassDef):
        found = method(cls[0], cls[1], names[1])
        return found and (found[0], found[1], cls[1], True)
      return None
    if names[0] in self.mod.external or names[0] in self.local_names():
      return None
    found = package.resolve_chain(self.mod.name, names)
    return found and (found[0], found[1], None, False)

  def local_names(self) -> Set[str]:
    """Parameters and locals: they shadow the module's names."""
    local = set(params(self.fn)) | {a.arg for a in self.fn.args.kwonlyargs}
    for node in ast.walk(self.fn):
      if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        local.add(node.id)
    return local


def assignments(node: ast.AST):
  """(target, value) pairs that `node` binds (value None when unknown)."""
  if isinstance(node, ast.Assign):
    return [(t, node.value) for t in node.targets]
  if isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
    return [(node.target, node.value)]
  if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
    return [(node.target, node.iter)]
  if isinstance(node, ast.withitem) and node.optional_vars is not None:
    return [(node.optional_vars, node.context_expr)]
  if isinstance(node, ast.NamedExpr):
    return [(node.target, node.value)]
  return []


def layer_of(module: str, layers: List[List[str]]) -> Optional[int]:
  """Rank of `module` in the layers (0 the lowest), by its longest listed prefix."""
  best = None
  for rank, line in enumerate(reversed(layers)):
    for entry in line:
      if (module == entry or module.startswith(entry + '.')) and (
          best is None or len(entry) > len(best[0])):
        best = (entry, rank)
  return None if best is None else best[1]


def measure(root: str, entry: str = 'vit_jax.train.train_and_evaluate',
            parameter: str = 'config') -> dict:
  """{'files', 'climbs', 'upward', 'edges'} of the walk from `entry` in the tree at `root`."""
  module, name = entry.rsplit('.', 1)
  package = Package(root, entry.split('.')[0])
  found = package.lookup(module, name)
  if found is None or found[0] == 'mod':
    raise ValueError(f'No function {entry} under {root}.')
  walk = Walk(package)
  walk.enter(found[0], found[1], frozenset([parameter]))
  modules = {path: mod for mod, path in package.paths.items()}
  layers = package.layers()
  rel = lambda path: os.path.relpath(path, root)  # noqa: E731
  climbs, upward = [], []
  for caller, callee in sorted(walk.edges):
    a, b = layer_of(modules[caller], layers), layer_of(modules[callee], layers)
    if a is not None and b is not None and a != b:
      (climbs if b < a else upward).append((rel(caller), rel(callee)))
  return dict(files=sorted(rel(f) for f in walk.files), climbs=climbs, upward=upward,
              edges=sorted((rel(a), rel(b)) for a, b in walk.edges))


def main(argv: Optional[List[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--root', default=os.path.join(os.path.dirname(__file__), '..'),
                      help='the tree to read (a checkout or `git archive <commit>` output)')
  parser.add_argument('--entry', default='vit_jax.train.train_and_evaluate')
  parser.add_argument('--parameter', default='config')
  args = parser.parse_args(argv)
  result = measure(os.path.abspath(args.root), args.entry, args.parameter)
  print(f'files entered: {len(result["files"])}')
  for file in result['files']:
    print(f'  {file}')
  print(f'climbs back up: {len(result["climbs"])}')
  for caller, callee in result['climbs']:
    print(f'  {caller} -> {callee}')
  if result['upward']:
    print(f'upward calls: {len(result["upward"])}: '
          + ' '.join(f'{a}->{b}' for a, b in result['upward']))
  return 0


if __name__ == '__main__':
  sys.exit(main())
