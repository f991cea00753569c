r"""The full from-scratch Fashion-MNIST recipe (long; run in the background, not in CI).

Command (wall time and accuracy measured here: see the README's Fashion-MNIST table):
  python -m vit_jax.main --config=configs/fashion_mnist_full.py --workdir=runs/fmnist_full
A small hybrid ViT in the paper's sense (like R+ViT-Ti_16): the official ResNet root (7x7
conv stride 2, GroupNorm, max-pool stride 2) turns 28x28 images into a 7x7 grid of 64-channel
features, a 1x1 patch embedding makes 49 tokens, then 4 pre-LN blocks of width 128 (MLP 384);
0.69M parameters.
A pure patch-7 ViT sees only 4x4 tokens and stopped at ~88% here; 49 tokens from a convolutional
root learn local structure much faster per epoch. AugReg-style regularisation sized for 12
epochs: random translation (reflect-pad 3 px + crop) and flips, label smoothing 0.1, AdamW
weight decay 0.05, 1 warmup epoch then cosine. Writes runs/fmnist_full/params.npz.
Expected (measured here, README table): 90.45% test accuracy after 12 epochs, 77 min on 2
CPU cores; still rising at the end (the 93% target needs a longer schedule).
"""

from vit_jax import config_lib


def get_config():
  config = config_lib.with_dataset(config_lib.get_config(), 'fashion_mnist')
  config.model = config_lib.small_vit('R+ViT-FMNIST', patch=1, hidden=128, layers=4, mlp=384,
                                      heads=4, resnet_layers=())
  config.pp.update(dict(crop=28, train_aug='pad_flip'))
  config.update(dict(
      pretrained_dir='', total_steps=0, num_epochs=12., optim='adamw', base_lr=2e-3,
      weight_decay=0.05, label_smoothing=0.1, warmup_steps=235, decay_type='cosine',
      grad_norm_clip=1., batch=256, batch_eval=1000, accum_steps=1, shuffle_buffer=60_000,
      progress_every=100, eval_every=470, checkpoint_every=470))
  return config.lock()
