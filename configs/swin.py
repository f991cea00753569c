r"""Fine-tunes a Swin Transformer from timm's weights: `--config=configs/swin.py:MODEL,DATASET`.

MODEL is a Swin preset (t7, s7, b7, b12, l7, l12 or the full name, e.g. Swin-T_4_7 = timm's
swin_tiny_patch4_window7_224); DATASET a preset dataset (cifar10, oxford_iiit_pet, ...) or a
folder of images (`{train,test or val}/<class>/*.jpg`). The weights are timm's, as a hub folder
(config.json + model.safetensors, e.g. `huggingface-cli download
timm/swin_tiny_patch4_window7_224.ms_in1k --local-dir /data/swin_t`) or its bare
model.safetensors or hf-hub:timm/<name>, passed with --config.pretrained_path: the architecture
comes from the file (it must agree with MODEL), the inputs are normalised with its config.json
mean/std (ImageNet's; pp.mean/pp.std, recorded in metadata.json), the head is replaced, and
relative-position tables are resized as timm resizes them when the window differs
(docs/analysis.md, "Fine-tuning timm's Swin weights").
Input: the model's published resolution (224px for window 7, 384px for window 12).
Recipe (timm-style transfer, not the official ViT SGD one): AdamW, lr 1e-4, weight decay 0.05,
stochastic depth 0.1, 50 warmup steps, cosine, batch 64, inception crop + flip.
Command (then `vit_jax.predict --checkpoint=runs/swin_t_folder IMAGES`, no --model needed):
  python -m vit_jax.main --config=configs/swin.py:t7,/data/my_images \
    --config.pretrained_path=/data/swin_t --workdir=runs/swin_t_folder
Expected: not measured here (the published weights cannot be downloaded on this machine); the
command runs as printed on a timm-format folder (tests/test_documented_commands.py, shrunk).
"""

from vit_jax import config_lib

SHORT_NAMES = {'t7': 'Swin-T_4_7', 's7': 'Swin-S_4_7', 'b7': 'Swin-B_4_7', 'b12': 'Swin-B_4_12',
               'l7': 'Swin-L_4_7', 'l12': 'Swin-L_4_12'}


def get_config(arg: str = 't7,oxford_iiit_pet'):
  """MODEL,DATASET[,runlocal]; --config.pretrained_path names the timm weights."""
  parts, runlocal = config_lib.parse_arg(arg)
  if len(parts) != 2:
    raise ValueError(f'Use configs/swin.py:MODEL,DATASET (e.g. t7,/data/my_images), got {arg!r}')
  model, dataset = parts
  config = config_lib.with_dataset(config_lib.with_model(
      config_lib.get_config(), SHORT_NAMES.get(model, model)), dataset)
  config.update(dict(pretrained_dir='', optim='adamw', base_lr=1e-4, weight_decay=0.05,
                     warmup_steps=50, batch=64, batch_eval=64, accum_steps=1))
  return config_lib.finish(config, runlocal)
