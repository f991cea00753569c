"""Writes a checkpoint as a timm hub folder (config.json + model.safetensors) for PyTorch.

  python -m vit_jax.export_timm --checkpoint=runs/quickstart/finetune --out=exports/quickstart

The checkpoint is anything the tools read (a run directory, an .npz, a published name, a timm
hub folder, .safetensors file or hf-hub name). In PyTorch, `timm.create_model(
'local-dir:exports/quickstart', pretrained=True)` then gives the same logits (config.json
carries the architecture, its model_args, the input size, mean and std, and the run's class
names as `label_names`). What timm's ViT cannot hold (hybrids, pre_logits, 2-D or sin-cos
position embeddings; Mixer, Swin and ResNet models) is one error line.
"""

import os
import sys
from typing import Sequence

from absl import flags

from vit_jax import checkpoint
from vit_jax.tools import cli
from vit_jax.weights.timm import files as timm_files
from vit_jax.weights.timm import export as timm_export
from vit_jax.weights import loading


for _name in ('checkpoint', 'model', 'image_size', 'out'):  # Defined in cli.py.
  flags.declare_key_flag(_name)
FLAG_HELP = {'image_size': 'Input side written into config.json (position embeddings are '
                           "fitted to it); default: the checkpoint's own.",
             'out': 'Folder to write config.json + model.safetensors into.'}


def main(argv: Sequence[str]) -> str:
  """Writes the checkpoint named by --checkpoint as a timm hub folder in --out."""
  if argv[1:]:
    raise ValueError(f'Unexpected arguments: {" ".join(argv[1:])}')
  source, out = cli.CHECKPOINT.value, cli.OUT.value
  if not source or not out:
    raise ValueError('Pass --checkpoint=PATH_OR_NAME and --out=FOLDER.')
  if os.path.isfile(out):
    raise ValueError(f'--out={out} is a file; pass a folder.')
  loaded = loading.load_model(source, cli.MODEL.value, cli.IMAGE_SIZE.value)
  try:
    folder = timm_export.export(loaded.params, loaded.config.to_dict(), out,
                                num_classes=loaded.num_classes, image_size=loaded.image_size,
                                mean=loaded.mean, std=loaded.std,
                                label_names=loaded.class_names)
  except timm_files.TimmFormatError as e:
    raise checkpoint.CheckpointError(str(e)) from None
  return (f'Wrote {folder}/{timm_files.WEIGHTS_FILE} and {timm_files.CONFIG_FILE}; in '
          f"PyTorch: timm.create_model('local-dir:{folder}', pretrained=True)")


if __name__ == '__main__':
  cli.run(sys.modules[__name__])
