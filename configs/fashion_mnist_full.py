r"""The full from-scratch Fashion-MNIST recipe (long; run in the background, not in CI).

Command (wall time and accuracy measured here: see the README's Fashion-MNIST table):
  python -m vit_jax.main --config=configs/fashion_mnist_full.py --workdir=runs/fmnist_full
A small hybrid ViT in the paper's sense (like R+ViT-Ti_16) on images upsampled to 56x56: the
official ResNet root (7x7 conv with stride 2, GroupNorm, max-pool with stride 2) makes a 14x14
grid of 64-channel features, so the convolution sees every original pixel at stride 1; 2x2
patches of it make 7x7 = 49 tokens, then 4 pre-LN blocks of width 128 (MLP 384); 0.71M
parameters. Measured here after one epoch: 82.1% with this tokeniser against 81.1% with the
28x28 input (1x1 patches of a 7x7 grid), at ~75% of its speed. A pure patch-7 ViT sees only 4x4
tokens and stopped at ~88%.
AugReg-style regularisation: random translation (reflect-pad 1/8 + crop) and flips, label
smoothing 0.1, AdamW weight decay 0.05, 1 warmup epoch then cosine. Writes
runs/fmnist_full/params.npz.
Expected (measured here, README table): with `--config.num_epochs=18` it reached 91.40% test
accuracy (~2 h on 2 CPU cores, 119-171 img/s per logged interval) and was still rising, so the
default is now 40 epochs (~3.5 h at the ~190 img/s measured with the faster GroupNorm/max-pool);
aiming at the 93% target.
"""

import ml_collections

from vit_jax import config_lib


def pretrain_stage() -> ml_collections.ConfigDict:
  """Stage 1: the hybrid from scratch at 56px (the 40-epoch recipe measured in the README)."""
  config = config_lib.with_dataset(config_lib.get_config(), 'fashion_mnist')
  config.model = config_lib.small_vit('R+ViT-FMNIST', patch=2, hidden=128, layers=4, mlp=384,
                                      heads=4, resnet_layers=())
  config.model.attention_impl = 'heads_first'
  config.pp.update(dict(crop=56, train_aug='pad_flip'))
  config.update(dict(
      pretrained_dir='', total_steps=0, num_epochs=40., optim='adamw', base_lr=2e-3,
      weight_decay=0.05, label_smoothing=0.1, warmup_steps=469, decay_type='cosine',
      grad_norm_clip=1., batch=128, batch_eval=1000, accum_steps=1, shuffle_buffer=60_000,
      progress_every=200, eval_every=938, checkpoint_every=938))
  return config


def finetune_stage() -> ml_collections.ConfigDict:
  """Stage 2: stage 1's npz at 80px (10x10 = 100 tokens, position embeddings resized)."""
  config = pretrain_stage()
  config.pp.crop = 80
  config.update(dict(num_epochs=4., base_lr=5e-4, warmup_steps=200, keep_head=True,
                     eval_every=469, checkpoint_every=469))
  return config


def get_config():
  config = ml_collections.ConfigDict()
  config.trainer = 'pretrain_then_finetune'  # Runs config.pretrain, then config.finetune.
  config.pretrain = pretrain_stage()
  config.finetune = finetune_stage()
  return config.lock()
