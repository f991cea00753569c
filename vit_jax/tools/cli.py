"""The shared shell of the command-line tools (predict, analyze, flops): flags, help, errors."""

import sys
from typing import Callable, Optional, Sequence

from absl import flags


def define_model_flags(fv: flags.FlagValues, image_size_help: str) -> None:
  """--checkpoint, --model and --image_size, shared by the tools that load a checkpoint."""
  flags.DEFINE_string('checkpoint', None, 'Checkpoint .npz (path, gs://, https://), a run '
                      'directory (its params.npz + metadata.json) or a published name such as '
                      'ViT-B_16 or augreg/<file stem>.', flag_values=fv)
  flags.DEFINE_string('model', None, 'Optional check: a preset (e.g. ViT-B_16) or a .py file '
                      'whose get_config() returns a model ConfigDict; the model itself is read '
                      'from the checkpoint.', flag_values=fv)
  flags.DEFINE_integer('image_size', None, image_size_help, flag_values=fv)


def run_tool(name: str, doc: str, define_flags: Callable[[flags.FlagValues], None],
             body: Callable[[flags.FlagValues, Sequence[str]], Optional[str]],
             argv: Optional[Sequence[str]] = None) -> int:
  """Parses `argv` into the tool's own FlagValues and runs `body(flags, positional_args)`.

  Each tool has its own FlagValues, so several tools can run in one process (tests). Bad input
  (flag errors, ValueError incl. CheckpointError/ImageError, OSError) prints one line
  `<name>: error: ...` and returns 1; whatever `body` returns is printed.
  """
  argv = list(sys.argv if argv is None else argv)
  fv = flags.FlagValues()
  define_flags(fv)
  if any(a in ('-h', '--help', '--helpfull') for a in argv[1:]):
    print(doc + '\nFlags:\n' + fv.get_help())
    return 0
  try:
    output = body(fv, fv(argv)[1:])
  except (flags.Error, ValueError, OSError) as e:
    print(f'{name}: error: {e}', file=sys.stderr)
    return 1
  if output:
    print(output)
  return 0
