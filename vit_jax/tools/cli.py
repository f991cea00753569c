"""The shared shell of the command-line tools (predict, analyze, flops, export_timm, fewshot).

Each tool is an absl program: flags at module level, `main(argv)` on the positional arguments,
run by `run` (absl's `app.run`). The flags several tools share are defined here, once: absl's
flags are global, and a process (the tests, a notebook) may import every tool; each tool
declares the ones it reads as its key flags (`declare_key_flag`), so its `--help` lists them,
and gives them its own defaults and help (`FLAG_DEFAULTS`, `FLAG_HELP`) when it runs. Bad input
(flag errors, ValueError incl. CheckpointError/ImageError, OSError) prints one line
`<tool>: error: ...` and exits 1; what `main` returns is printed (an int: the exit status).
"""

import os
import sys
import types
from typing import Any, List, Sequence, Union

from absl import app
from absl import flags

FLAGS = flags.FLAGS

_CHECKPOINT_HELP = ('Checkpoint .npz (path, gs://, https://), a run directory (its params.npz + '
                    'metadata.json) or a published name such as ViT-B_16 or augreg/<file stem>.')
_MODEL_HELP = ('Optional check: a preset (e.g. ViT-B_16) or a .py file whose get_config() returns '
               'a model ConfigDict; the model itself is read from the checkpoint.')
CHECKPOINT, MODEL, OUT = (flags.DEFINE_string(name, None, text) for name, text in (
    ('checkpoint', _CHECKPOINT_HELP), ('model', _MODEL_HELP), ('out', 'Output folder.')))
IMAGE_SIZE, BATCH_SIZE = (flags.DEFINE_integer(name, None, text) for name, text in (
    ('image_size', 'Square input side in pixels.'), ('batch_size', 'Images per forward pass.')))
JSON = flags.DEFINE_bool('json', False, 'Print one JSON document instead of text.')
_SHARED = {f.name: (f.default, FLAGS[f.name].help)
           for f in (CHECKPOINT, MODEL, IMAGE_SIZE, BATCH_SIZE, OUT, JSON)}


def run(tool: types.ModuleType) -> None:
  """Runs `tool.main` as the program (absl's `app.run`), with the tool's flag defaults."""
  adapt_shared_flags(tool)
  app.run(lambda argv: _finish(tool, argv), flags_parser=lambda argv: _parse(tool, argv))


def call(tool: types.ModuleType, argv: Sequence[str]) -> int:
  """Runs `tool` in this process as `python -m` would with `argv` (program name first).

  Returns the exit status. Only the tool's own flags are parsed (its key flags: other modules'
  flags, e.g. main.py's required --config, are not checked), and only they are reset before and
  after, so calls (of one tool or several) do not see each other's flags. Other flags keep
  their values: resetting all of them would also reset absl's --verbosity, which pins the absl
  logger at WARNING for the rest of the process.
  """
  own = flags.FlagValues()
  for flag in FLAGS.get_key_flags_for_module(tool.__name__):
    own[flag.name] = flag  # The same Flag objects: their values are what the tool reads.
  own.unparse_flags()
  try:
    adapt_shared_flags(tool)
    try:
      positional = own(list(argv))
    except flags.Error as e:
      return print_error(tool, e)
    FLAGS.mark_as_parsed()
    return _finish(tool, positional)
  finally:
    own.unparse_flags()


def adapt_shared_flags(tool: types.ModuleType) -> None:
  """Gives the flags defined here `tool`'s defaults and help texts (`--help` shows them).

  Also for programs beyond the tools that import one (research/small_data's --out).
  """
  for name, (default, text) in _SHARED.items():
    FLAGS.set_default(name, getattr(tool, 'FLAG_DEFAULTS', {}).get(name, default))
    FLAGS[name].help = getattr(tool, 'FLAG_HELP', {}).get(name, text)


def _parse(tool: types.ModuleType, argv: Sequence[str]) -> List[str]:
  try:
    return FLAGS(list(argv))
  except flags.Error as e:
    sys.exit(print_error(tool, e))
  except SystemExit:  # absl's --help/--helpfull printed the help and exit 1; the tools exit 0.
    sys.exit(0)


def _finish(tool: types.ModuleType, argv: Sequence[str]) -> int:
  try:
    output: Union[None, int, str] = tool.main(argv)
  except (ValueError, OSError) as e:
    return print_error(tool, e)
  if isinstance(output, int):  # The exit status, the errors already said (`print_error`).
    return output
  if output:
    print(output)
  return 0


def print_error(tool: types.ModuleType, error: Any) -> int:
  """Prints `<tool>: error: <error>` (one line, on stderr); returns the exit status, 1."""
  name = os.path.splitext(os.path.basename(tool.__file__))[0]  # Also when it is __main__.
  print(f'{name}: error: {error}', file=sys.stderr)
  return 1
