r"""Trains ViT-S/16 on ImageNet-1k from scratch with AugReg-style regularisation.

Command:
  python -m vit_jax.main --config=configs/pretrain_i1k.py --workdir=runs/i1k_s16 \
      --config.tfds_manual_dir=/path/to/imagenet
Recipe ("How to train your ViT?", i1k 300 epochs, "medium" augmentation): AdamW lr 1e-3,
weight decay 0.1, batch 4096, 10k warmup + cosine, RandAugment(2, 10), Mixup 0.2, dropout 0,
stochastic depth 0.1, 224px. Expected: not measured here, and no published figure for exactly
this recipe; for comparison, big_vision's configs/vit_s16_i1k.py (a plainer ViT-S/16 recipe:
batch 1024, GAP head, sincos2d position embeddings, RandAugment(2, 10), Mixup 0.2) states 76.5%
after 90 epochs.
"""

from vit_jax import config_lib


def get_config(arg: str = ''):
  """`:runlocal` shrinks the run for a smoke test (config_lib.shrink)."""
  _, runlocal = config_lib.parse_arg(arg)
  config = config_lib.with_model(config_lib.get_config(), 'ViT-S_16')
  config.model.stochastic_depth = 0.1
  config.dataset = 'imagenet2012'
  config.pp.update(dict(train='train[:99%]', test='validation', crop=224))
  config.pp.randaug.update(dict(num_layers=2, magnitude=10))
  config.update(dict(
      pretrained_dir='', total_steps=0, num_epochs=300., optim='adamw', base_lr=1e-3,
      weight_decay=0.1, warmup_steps=10_000, decay_type='cosine', batch=4096, batch_eval=4096,
      accum_steps=1, mixup=0.2, eval_every=2_000, checkpoint_every=1_000))
  return config_lib.finish(config, runlocal)
