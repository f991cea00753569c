r"""Pretrains ViT-B/16 on ImageNet-21k from scratch (the ViT paper's recipe).

ImageNet-21k is not in the TFDS catalog: give it as a folder of images, one sub-folder per
class (`/data/imagenet21k/train/<wnid>/*.JPEG`, e.g. the winter-2021 release unpacked). 1% of
it (~142k images, every class in proportion) is held out for evaluation, like the paper's
102,400-image split of the full set.
Command:
  python -m vit_jax.main --config=configs/pretrain_i21k_b16.py --workdir=runs/i21k_b16 \
      --config.dataset=/data/imagenet21k
Recipe (ViT paper, arXiv:2010.11929, Sec. 4.1 and Table 3's ImageNet-21k ViT-B/{16,32} row):
Adam b1 0.9 b2 0.999, batch 4096, lr 1e-3, weight decay 0.03 (Table 3; Sec. 4.1's "high weight
decay of 0.1" is its JFT-300M value), 10k warmup steps then linear decay, dropout 0.1, 90
epochs at 224px, representation layer (pre_logits, 768). Expected (not reproduced here): the
quality of the published gs://vit_models/imagenet21k/ViT-B_16.npz, which the official README
fine-tunes to 84.53% on ImageNet-1k at 384px.
"""

from vit_jax import config_lib


def get_config(arg: str = ''):
  """`:runlocal` shrinks the run for a smoke test (config_lib.shrink)."""
  _, runlocal = config_lib.parse_arg(arg)
  config = config_lib.with_model(config_lib.get_config(), 'ViT-B_16')
  config.model.representation_size = 768
  config.model.transformer.dropout_rate = 0.1
  config.dataset = ''  # A folder: --config.dataset=/data/imagenet21k (see the docstring).
  config.pp.update(dict(train='train[1%:]', test='train[:1%]', crop=224))
  config.update(dict(
      pretrained_dir='', total_steps=0, num_epochs=90., optim='adamw', base_lr=1e-3,
      weight_decay=0.03, warmup_steps=10_000, decay_type='linear', grad_norm_clip=1.,
      batch=4096, batch_eval=4096, accum_steps=1, loss='sigmoid_xent', eval_every=5_000,
      checkpoint_every=1_000))
  config.model.head_bias_init = -10.  # With sigmoid loss, as in big_vision's i21k recipe.
  return config_lib.finish(config, runlocal)
