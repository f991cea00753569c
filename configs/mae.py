r"""MAE pretraining (He et al. 2022) without labels: `--config=configs/mae.py:MODEL,DATASET`.

MODEL is a short name of configs/vit.py (b16, l16, h14, ...) or a preset name; DATASET a TFDS
name or a folder of images (labels unused: `DIR/train/*.jpg` without class folders works).
Command:
  python -m vit_jax.main --config=configs/mae.py:b16,imagenet2012 --workdir=runs/mae_b16_i1k
The export (runs/mae_b16_i1k/params.npz) is the ViT-B/16 encoder in the published format;
fine-tune it like any checkpoint:
  python -m vit_jax.main --config=configs/vit.py:b16,cifar10 --workdir=runs/mae_b16_cifar10 \
      --config.pretrained_path=runs/mae_b16_i1k
Recipe: the MAE paper's pretraining settings (arXiv:2111.06377, Table 8 and section 4): mask
ratio 75%, decoder 8 blocks of width 512 (16 heads), per-patch normalised pixel loss, AdamW
with lr 1.5e-4 x batch / 256 (batch 4096: 2.4e-3), weight decay 0.05, betas (0.9, 0.95), 40
warmup epochs (on ImageNet: 12,386 steps) then cosine, 800 epochs (1600 for their best
numbers: --config.num_epochs=1600), random resized crop (20-100% of the area) + flip at 224px.
Differences: the encoder keeps the learned 1-D position embeddings of the published ViT tree
(MAE: fixed sin-cos; set --config.model.posemb=sincos2d) and the official tanh GELU.
Expected: the paper reports 83.6% on ImageNet after fine-tuning ViT-B/16 (1600 epochs); not
measured here.
"""

from vit_jax import config_lib

SHORT_NAMES = config_lib.load_config_module(__file__.replace('mae.py', 'vit.py')).SHORT_NAMES
BATCH = 4096
# MAE's 40 warmup epochs in steps on ImageNet's train[:99%] at batch 4096, for every dataset
# (set --config.warmup_steps for another one; a warmup longer than the run is cut to 10%).
WARMUP_STEPS = int(40 * 1_281_167 * 0.99 / BATCH)


def get_config(arg: str = 'b16,imagenet2012'):
  """`:runlocal` shrinks the run for a smoke test (config_lib.shrink)."""
  parts, runlocal = config_lib.parse_arg(arg)
  if len(parts) != 2:
    raise ValueError(f'Use configs/mae.py:MODEL,DATASET (e.g. b16,imagenet2012), got {arg!r}')
  model, dataset = parts
  config = config_lib.with_dataset(
      config_lib.with_model(config_lib.get_config(), SHORT_NAMES.get(model, model)), dataset)
  config.trainer = 'mae'
  config.model.transformer.update(dict(dropout_rate=0., attention_dropout_rate=0.))
  config.pp.update(dict(crop=224, train_aug='inception', area_min=0.2))
  config.mae.update(dict(mask_ratio=0.75, decoder_width=512, decoder_depth=8, decoder_heads=16,
                         norm_pix_loss=True))
  config.update(dict(
      pretrained_dir='', total_steps=0, num_epochs=800., optim='adamw',
      base_lr=1.5e-4 * BATCH / 256, weight_decay=0.05, b1=0.9, b2=0.95, decay_type='cosine',
      warmup_steps=WARMUP_STEPS, batch=BATCH, batch_eval=1024,
      accum_steps=1, grad_norm_clip=0., optim_dtype='float32', eval_every=5_000,
      checkpoint_every=1_000))
  return config_lib.finish(config, runlocal)
