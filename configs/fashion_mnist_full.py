r"""The full from-scratch Fashion-MNIST recipe in two stages (long; run it in the background).

Command (wall time and accuracy measured here: see the README's Fashion-MNIST table):
  python -m vit_jax.main --config=configs/fashion_mnist_full.py --workdir=runs/fmnist_full
Stage 1 (runs/fmnist_full/pretrain) trains a small hybrid ViT in the paper's sense (like
R+ViT-Ti_16) from scratch on images upsampled to 56x56: the official ResNet root (7x7 conv with
stride 2, GroupNorm, max-pool with stride 2) makes a 14x14 grid of 64-channel features, so the
convolution sees every original pixel at stride 1; 2x2 patches of it make 7x7 = 49 tokens, then
4 pre-LN blocks of width 128 (MLP 384); 0.71M parameters. AugReg-style regularisation: random
translation (reflect-pad 1/8 + crop) and flips, random erasing with probability 0.5 (both
stages), label smoothing 0.1, AdamW weight decay 0.05, 1 warmup epoch then cosine, 50 epochs.
It exports runs/fmnist_full/pretrain/params.npz.
Stage 2 (runs/fmnist_full/finetune) fine-tunes that npz at 64x64 (8x8 = 64 tokens, the
position embeddings interpolated, head kept) for 3 epochs at lr 5e-4; its npz is the final one.
(64px rather than 80px: a 64px step costs ~1.3x a 56px step, an 80px step ~2.2x, and the 40-epoch
npz scored 92.27% at 64px before any fine-tuning against 89.92% at 80px.)
Interrupt either stage with SIGTERM/Ctrl-C and rerun the command: it resumes where it stopped.
Expected: the 50-epoch recipe with random erasing is being measured (README table). The
previous default, `--config.pretrain.num_epochs=40 --config.pretrain.pp.random_erase=0
--config.finetune.pp.random_erase=0`, measured here: stage 1 alone reached 92.89% test
accuracy after 40 epochs (peak 93.02% at epoch 36; ~4 h on 2 CPU cores at 110-190 img/s); the
80px fine-tune of that npz had 92.12 / 92.49 / 92.92% after 1 / 2 / 3 of its 4 epochs (the
run's last epoch and files were lost with the machine). The repeat with stage 2 at 64px for 3
epochs (2026-11-23, 4 h 51 min) gave 92.94% after stage 1 (peak 92.98% at epoch 38) and
91.76 / 92.58 / 92.94% after the fine-tune's epochs 1 / 2 / 3. A shorter stage 1,
`--config.pretrain.num_epochs=18`, gave 91.40%.
"""

import ml_collections

from vit_jax import config_lib


def pretrain_stage() -> ml_collections.ConfigDict:
  """Stage 1: the hybrid from scratch at 56px, 50 epochs with random erasing."""
  config = config_lib.with_dataset(config_lib.get_config(), 'fashion_mnist')
  config.model = config_lib.small_vit('R+ViT-FMNIST', patch=2, hidden=128, layers=4, mlp=384,
                                      heads=4, resnet_layers=())
  config.model.attention_impl = 'heads_first'
  config.pp.update(dict(crop=56, train_aug='pad_flip', random_erase=0.5))
  config.update(dict(
      pretrained_dir='', total_steps=0, num_epochs=50., optim='adamw', base_lr=2e-3,
      weight_decay=0.05, label_smoothing=0.1, warmup_steps=469, decay_type='cosine',
      grad_norm_clip=1., batch=128, batch_eval=1000, accum_steps=1, shuffle_buffer=60_000,
      progress_every=200, eval_every=938, checkpoint_every=938))
  return config


def finetune_stage() -> ml_collections.ConfigDict:
  """Stage 2: stage 1's npz at 64px (8x8 = 64 tokens, position embeddings resized)."""
  config = pretrain_stage()
  config.pp.crop = 64
  config.update(dict(num_epochs=3., base_lr=5e-4, warmup_steps=200, keep_head=True,
                     eval_every=469, checkpoint_every=469))
  return config


def get_config():
  config = ml_collections.ConfigDict()
  config.trainer = 'pretrain_then_finetune'  # Runs config.pretrain, then config.finetune.
  config.pretrain = pretrain_stage()
  config.finetune = finetune_stage()
  return config.lock()
