r"""Self-supervised pretraining on Fashion-MNIST's 60k training images without labels, then
fine-tuning with labels: `--config=configs/fashion_mnist_ssl.py:METHOD` (mae or mpp).

The recipe is sized to run in about an hour on 2 CPU cores (docs/self_supervised.md, "The
one-hour recipe", has the measured run):
  python -m vit_jax.main --config=configs/fashion_mnist_ssl.py:mae --workdir=runs/fmnist_mae
  python -m vit_jax.main --config=configs/fashion_mnist_ssl.py:mpp --workdir=runs/fmnist_mpp
Stage 1 (runs/fmnist_mae/pretrain) trains a 0.8M-parameter ViT (patch 4: 7x7 tokens at 28px,
width 128, 4 blocks) with the method's loss: MAE for 15 epochs (3,515 steps of batch 256) hides
75% of the patches from the encoder and a 2-block width-64 decoder reconstructs their
normalised pixels (AdamW, betas (0.9, 0.95), weight decay 0.05; lr 1.5e-3, ten times MAE's
1.5e-4 x batch / 256, for a schedule this short); MPP for 10 epochs (its encoder sees every
token, so an epoch costs more) corrupts 50% of the patch embeddings and predicts each one's
3-bit mean colour (Adam 1e-3). Its params.npz is the encoder alone. Stage 2
(runs/fmnist_mae/finetune) adds a new 10-class head and fine-tunes all weights for 6 epochs on
the labelled images. Longer pretraining is one flag (`--config.pretrain.num_epochs=30`).
Fine-tuning on a slice of the labels reuses stage 1 (its own sub-workdir resumes):
  --config.finetune.pp.train='train[:1%]' --config.finetune.num_epochs=50
Stage 1 alone (`:mae,stage1`), whose export the small-data study's runs fine-tune
(configs/study_fashion_mnist.py:model=vit4 with its pretrained_path; docs/self_supervised.md,
Results, has the commands):
  python -m vit_jax.main --config=configs/fashion_mnist_ssl.py:mae,stage1 --workdir=runs/mae1
Expected: docs/self_supervised.md has the measured run of `:mae` (time and test accuracy) and
what shorter MAE and MPP encoders (4 and 1 epochs) give when fine-tuned on the small-data
study's slices; for comparison, the supervised quickstart (configs/fashion_mnist_quickstart.py)
reaches 88.1%.
"""

import ml_collections

from vit_jax import config_lib


def stage(patch: int = 4, **overrides) -> ml_collections.ConfigDict:
  """One stage on Fashion-MNIST at 28px with the shared ViT (width 128, 4 blocks) at `patch`."""
  config = config_lib.with_dataset(config_lib.get_config(), 'fashion_mnist')
  config.model = config_lib.small_vit(f'ViT-FMNIST_{patch}', patch=patch, hidden=128, layers=4,
                                      mlp=256, heads=4)
  config.pp.crop = 28
  config.update(dict(pretrained_dir='', total_steps=0, optim='adamw', batch=256,
                     batch_eval=1000, accum_steps=1, optim_dtype='float32',
                     shuffle_buffer=20_000, progress_every=50, checkpoint_every=500,
                     grad_norm_clip=1.))
  config.update(overrides)
  return config


PRETRAIN = {
    'mae': dict(num_epochs=15., warmup_steps=235, base_lr=1.5e-3, b2=0.95, weight_decay=0.05,
                mae=dict(mask_ratio=0.75, decoder_width=64, decoder_depth=2, decoder_heads=4,
                         norm_pix_loss=True)),
    'mpp': dict(num_epochs=10., warmup_steps=235, base_lr=1e-3, weight_decay=0.),
}


PATCHES = (4, 7)  # 28px in 7x7 or 4x4 tokens: the study's `vit4` and `vit` (round 3's ViT).


def get_config(arg: str = 'mae'):
  """`:METHOD,stage1` is stage 1 alone (the study's fine-tunes start from its export);
  `,patch=7` pretrains the study's patch-7 ViT instead (small-data study round 3);
  `:runlocal` shrinks both stages for a smoke test (config_lib.shrink)."""
  parts, runlocal = config_lib.parse_arg(arg)
  stage1 = 'stage1' in parts
  patch = [p.partition('=')[2] for p in parts if p.startswith('patch=')]
  parts = tuple(p for p in parts if p != 'stage1' and not p.startswith('patch='))
  if (len(parts) != 1 or parts[0] not in PRETRAIN or len(patch) > 1
      or patch and patch[0] not in {str(p) for p in PATCHES}):
    raise ValueError(f'Use configs/fashion_mnist_ssl.py:mae or :mpp (,stage1)(,patch=4 or 7), '
                     f'got {arg!r}')
  method, patch = parts[0], int(patch[0]) if patch else PATCHES[0]
  config = ml_collections.ConfigDict()
  config.trainer = 'pretrain_then_finetune'  # Runs config.pretrain, then config.finetune.
  # Stage 1: the 60k training images, labels unused; eval = the method's loss on the test set.
  config.pretrain = stage(patch, trainer=method, eval_every=0, checkpoint_every=250,
                          **PRETRAIN[method])
  config.pretrain.pp.train_aug = 'pad_flip'
  if stage1:
    return config_lib.finish(config.pretrain, runlocal)
  # Stage 2: from stage 1's encoder (pretrained_path is set by the trainer), a new head.
  config.finetune = stage(patch, num_epochs=6., base_lr=1e-3, weight_decay=0.05, warmup_steps=140,
                          eval_every=703)
  config.finetune.pp.train_aug = 'none'
  return config_lib.finish(config, runlocal)
