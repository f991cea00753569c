r"""Masked patch prediction (the ViT paper's): `--config=configs/mpp.py:MODEL,DATASET`.

MODEL is a short name of configs/vit.py (b16, l16, ...) or a preset name; DATASET a TFDS name
or a folder of images (labels unused: `DIR/train/*.jpg` without class folders works).
Command:
  python -m vit_jax.main --config=configs/mpp.py:b16,imagenet2012 --workdir=runs/mpp_b16_i1k
Fine-tune the exported encoder like any checkpoint:
  python -m vit_jax.main --config=configs/vit.py:b16,imagenet2012 --workdir=runs/mpp_b16_ft \
      --config.pretrained_path=runs/mpp_b16_i1k
Recipe: the paper's Appendix B.1.2 (arXiv:2010.11929): corrupt 50% of the patch embeddings
(80% become a learned [mask] embedding, 10% another patch's embedding, 10% stay), predict each
corrupted patch's 3-bit mean colour (512 classes; --config.mpp.target=color_4x4 or pixels for
the two other targets it tried), ViT-B/16, 1M steps at batch 4096, Adam (no weight decay)
with lr 2e-4, 10k warmup steps then cosine, 224px. The paper pretrained on JFT (1M steps are
~14 epochs there); on ImageNet the same steps are ~3200 epochs. Expected: the paper reports 79.9%
on ImageNet after fine-tuning (2% over training from scratch, 4% under supervised
pretraining); not measured here.
"""

from vit_jax import config_lib

SHORT_NAMES = config_lib.load_config_module(__file__.replace('mpp.py', 'vit.py')).SHORT_NAMES


def get_config(arg: str = 'b16,imagenet2012'):
  """`:runlocal` shrinks the run for a smoke test (config_lib.shrink)."""
  parts, runlocal = config_lib.parse_arg(arg)
  if len(parts) != 2:
    raise ValueError(f'Use configs/mpp.py:MODEL,DATASET (e.g. b16,imagenet2012), got {arg!r}')
  model, dataset = parts
  config = config_lib.with_dataset(
      config_lib.with_model(config_lib.get_config(), SHORT_NAMES.get(model, model)), dataset)
  config.trainer = 'mpp'
  config.pp.crop = 224
  config.mpp.update(dict(corrupt=0.5, mask=0.8, random=0.1, target='mean_color', color_bits=3))
  config.update(dict(
      pretrained_dir='', total_steps=1_000_000, optim='adamw', base_lr=2e-4, weight_decay=0.,
      b1=0.9, b2=0.999, decay_type='cosine', warmup_steps=10_000, batch=4096, batch_eval=1024,
      accum_steps=1, optim_dtype='float32', eval_every=10_000, checkpoint_every=2_000))
  return config_lib.finish(config, runlocal)
