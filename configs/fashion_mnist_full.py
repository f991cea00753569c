r"""The full from-scratch Fashion-MNIST recipe in two stages (long; run it in the background).

Commands (both stages; stage 1 alone):
  python -m vit_jax.main --config=configs/fashion_mnist_full.py --workdir=runs/fmnist_full
  python -m vit_jax.main --config=configs/fashion_mnist_full.py:pretrain --workdir=runs/fmnist_44
Stage 1 (runs/fmnist_full/pretrain) trains a small hybrid ViT in the paper's sense (like
R+ViT-Ti_16, 0.71M parameters) from scratch on images upsampled to 56x56: the official ResNet
root (7x7 conv with stride 2, GroupNorm, max-pool with stride 2) makes a 14x14 grid of
64-channel features, so the convolution sees every original pixel at stride 1; 2x2 patches of it
make 7x7 = 49 tokens, then 4 pre-LN blocks of width 128 (MLP 384). AugReg-style regularisation:
random translation (reflect-pad 1/8 + crop) and flips, label smoothing 0.1, AdamW weight decay
0.05, 1 warmup epoch then cosine, 44 epochs; it exports runs/fmnist_full/pretrain/params.npz.
Stage 2 (runs/fmnist_full/finetune) fine-tunes that npz at 64x64 (8x8 tokens, position
embeddings interpolated, head kept) for 3 epochs at lr 5e-4; its npz is the final one.
Interrupt either stage with SIGTERM/Ctrl-C and rerun the command: it resumes where it stopped.
Expected on 2 vCPUs: stage 1 alone reached 93.24% test accuracy in 2 h 31 min (2026-11-23, 2 CPU
devices); both stages together with 44 epochs were not measured (with 40: 92.94% in 4 h 51 min).
Runs, variants and per-epoch curves: docs/fashion_mnist.md.
"""

import ml_collections

from vit_jax import config_lib


def pretrain_stage() -> ml_collections.ConfigDict:
  """Stage 1: the hybrid from scratch at 56px, 44 epochs."""
  config = config_lib.with_dataset(config_lib.get_config(), 'fashion_mnist')
  config.model = config_lib.small_vit('R+ViT-FMNIST', patch=2, hidden=128, layers=4, mlp=384,
                                      heads=4, resnet_layers=())
  config.model.attention_impl = 'heads_first'
  config.pp.update(dict(crop=56, train_aug='pad_flip'))
  config.update(dict(
      pretrained_dir='', total_steps=0, num_epochs=44., optim='adamw', base_lr=2e-3,
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


def get_config(arg: str = ''):
  """`:pretrain` runs stage 1 alone (one workdir); `,runlocal` shrinks either for a smoke test."""
  parts, runlocal = config_lib.parse_arg(arg)
  stages = parts[0] if parts else 'both'
  if stages == 'pretrain':
    return config_lib.finish(pretrain_stage(), runlocal)
  if stages != 'both':
    raise ValueError(f'Unknown stages {stages!r}; use fashion_mnist_full.py or '
                     'fashion_mnist_full.py:pretrain.')
  config = ml_collections.ConfigDict()
  config.trainer = 'pretrain_then_finetune'  # Runs config.pretrain, then config.finetune.
  config.pretrain = pretrain_stage()
  config.finetune = finetune_stage()
  return config_lib.finish(config, runlocal)
