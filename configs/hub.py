r"""Fine-tunes a timm-format ViT (Hugging Face hub weights) on a dataset: no model name needed.

`--config=configs/hub.py:DATASET --config.pretrained_path=CHECKPOINT`, where CHECKPOINT is a hub
folder (config.json + model.safetensors, e.g. from `huggingface-cli download
timm/vit_small_patch14_dinov2.lvd142m --local-dir hub/vit_small_patch14_dinov2.lvd142m`), a
.safetensors file or `hf-hub:timm/<name>` (downloaded through huggingface_hub's cache). The
model (DINOv2, CLIP, SigLIP, DeiT, AugReg, MAE-style ..., Swin v1) is read from the checkpoint;
it gets a new zero head and its position embeddings fitted to pp.crop (224 here; a multiple of
the patch: 224 for /14 and /16 models), and trains on inputs normalised with the checkpoint's
config.json mean/std (pp.mean/pp.std, recorded in the run's metadata.json). DATASET is a TFDS
name of config_lib.DATASET_PRESETS or a folder of images (`{train,test or val}/<class>/*.jpg`).
Official fine-tuning otherwise (SGD momentum, cosine, batch 512, grad clip 1); set
--config.base_lr for your data.
Commands (the hub folders are local copies of timm/vit_small_patch14_dinov2.lvd142m and
timm/vit_base_patch16_clip_224.openai):
  python -m vit_jax.main --config=configs/hub.py:/data/my_images \
    --config.pretrained_path=hub/vit_small_patch14_dinov2.lvd142m --workdir=runs/dinov2_folder
  python -m vit_jax.main --config=configs/hub.py:/data/my_images \
    --config.pretrained_path=hub/vit_base_patch16_clip_224.openai --config.base_lr=0.003 \
    --workdir=runs/clip_folder
Expected: a run directory with params.npz + metadata.json that vit_jax.predict and
vit_jax.export_timm read; the accuracy depends on the folder (not measured here).
"""

from vit_jax import config_lib


def get_config(arg: str = 'cifar10'):
  parts, runlocal = config_lib.parse_arg(arg)
  if len(parts) != 1:
    raise ValueError(f'Use configs/hub.py:DATASET (a TFDS name or a folder), got {arg!r}')
  config = config_lib.with_dataset(config_lib.get_config(), parts[0])
  config.pretrained_dir = ''  # The checkpoint is --config.pretrained_path (required).
  config.pp.crop = 224  # Fine-tuning resolution; the position embeddings are fitted to it.
  return config_lib.finish(config, runlocal)
