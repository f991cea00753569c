"""Writes a checkpoint as a timm hub folder (config.json + model.safetensors) for PyTorch.

  python -m vit_jax.export_timm --checkpoint=runs/quickstart/finetune --out=exports/quickstart

The checkpoint is anything the tools read (a run directory, an .npz, a published name, a timm
hub folder, .safetensors file or hf-hub name). In PyTorch, `timm.create_model(
'local-dir:exports/quickstart', pretrained=True)` then gives the same logits (config.json
carries the architecture, its model_args and the input size, mean and std). What timm's ViT
cannot hold (hybrids, pre_logits, 2-D or sin-cos position embeddings) is one error line.
"""

import os
import sys
from typing import Optional, Sequence

from absl import flags

from vit_jax import checkpoint
from vit_jax.tools import cli
from vit_jax.checkpoints import timm_files
from vit_jax.checkpoints import timm_export
from vit_jax.checkpoints import loading


def define_flags(fv: flags.FlagValues) -> None:
  cli.define_model_flags(fv, 'Input side written into config.json (position embeddings are '
                         'fitted to it); default: the checkpoint\'s own.')
  flags.DEFINE_string('out', None, 'Folder to write config.json + model.safetensors into.',
                      flag_values=fv)


def run(fv: flags.FlagValues, args: Sequence[str]) -> str:
  if args:
    raise ValueError(f'Unexpected arguments: {" ".join(args)}')
  if not fv.checkpoint or not fv.out:
    raise ValueError('Pass --checkpoint=PATH_OR_NAME and --out=FOLDER.')
  if os.path.isfile(fv.out):
    raise ValueError(f'--out={fv.out} is a file; pass a folder.')
  loaded = loading.load_model(fv.checkpoint, fv.model, fv.image_size)
  try:
    out = timm_export.export(loaded.params, loaded.config.to_dict(), fv.out,
                             num_classes=loaded.num_classes, image_size=loaded.image_size,
                             mean=loaded.mean, std=loaded.std)
  except timm_files.TimmFormatError as e:
    raise checkpoint.CheckpointError(str(e)) from None
  return (f'Wrote {out}/{timm_files.WEIGHTS_FILE} and {timm_files.CONFIG_FILE}; in PyTorch: '
          f"timm.create_model('local-dir:{out}', pretrained=True)")


def main(argv: Optional[Sequence[str]] = None) -> int:
  return cli.run_tool('export_timm', __doc__, define_flags, run, argv)


if __name__ == '__main__':
  sys.exit(main())
