"""timm (PyTorch, CPU) reads the .npz files `checkpoint.save` writes and computes the same logits.

timm is an independent implementation of the published format and of the models, so this pins
both our file layout (pre-Linen names, (1, 1, 1, C) GroupNorm) and our numerics.
"""

import jax
import numpy as np
import pytest

from npz_fixtures import images, perturb
from vit_jax import checkpoint
from vit_jax import models

torch = pytest.importorskip('torch', reason='timm interop needs torch (pip install .[test])')
timm = pytest.importorskip('timm', reason='timm interop needs timm (pip install .[test])')

NUM_CLASSES = 7


def _ours(model, size, tmp_path, seed):
  x = images(2, size, size, seed=seed)
  params = model.init(jax.random.key(seed), x[:1], train=False)['params']
  # Random, non-zero weights everywhere (incl. head, cls, zero-init GroupNorm scales).
  params = perturb(params, seed=seed, scale=0.05)
  path = checkpoint.save(params, str(tmp_path / 'ours.npz'))
  logits = np.asarray(model.apply({'params': params}, x, train=False))
  assert np.abs(logits).max() > 1e-2
  return path, x, logits


def _timm_logits(timm_model, path, x):
  timm_model.load_pretrained(path)
  timm_model.eval()
  with torch.no_grad():
    return timm_model(torch.from_numpy(x.transpose(0, 3, 1, 2).copy())).numpy()


def _create(name, size, **kwargs):
  # timm defaults to exact (erf) GELU; the official models use the tanh approximation.
  return timm.create_model(name, pretrained=False, num_classes=NUM_CLASSES, img_size=size,
                           act_layer='gelu_tanh', **kwargs)


def test_vit_ti16(tmp_path):
  size = 64
  model = models.get_model('ViT-Ti_16', num_classes=NUM_CLASSES)
  path, x, ours = _ours(model, size, tmp_path, seed=0)
  tm = _create('vit_tiny_patch16_224', size)
  assert tm.pos_embed.shape == (1, 1 + (size // 16)**2, 192)
  assert sum(p.numel() for p in tm.parameters()) == sum(
      a.size for a in checkpoint.read_npz(path).values())
  theirs = _timm_logits(tm, path, x)
  assert np.abs(theirs - ours).max() <= 1e-4


def test_gap(tmp_path):
  size = 64
  model = models.get_model('ViT-S_16-gap-norep', num_classes=NUM_CLASSES)
  path, x, ours = _ours(model, size, tmp_path, seed=1)
  assert 'cls' not in checkpoint.read_npz(path)
  tm = _create('vit_small_patch16_224', size, global_pool='avg', class_token=False,
               fc_norm=False)
  assert tm.pos_embed.shape == (1, (size // 16)**2, 384)
  theirs = _timm_logits(tm, path, x)
  assert np.abs(theirs - ours).max() <= 1e-4


def test_hybrid_r_ti16(tmp_path):
  # R+ViT-Ti_16: ResNet root (/4) then 8x8 patches → effective /32; 64px → 2x2 tokens + cls.
  size = 64
  model = models.get_model('R+ViT-Ti_16', num_classes=NUM_CLASSES)
  path, x, ours = _ours(model, size, tmp_path, seed=2)
  flat = checkpoint.read_npz(path)
  assert flat['gn_root/scale'].shape == (1, 1, 1, 64)
  tm = _create('vit_tiny_r_s16_p8_224', size)
  grid = models.token_grid(models.MODEL_CONFIGS['R+ViT-Ti_16'], (size, size))
  assert tuple(tm.patch_embed.grid_size) == grid == (2, 2)
  assert tm.pos_embed.shape == flat['Transformer/posembed_input/pos_embedding'].shape
  assert sum(p.numel() for p in tm.parameters()) == sum(a.size for a in flat.values())
  theirs = _timm_logits(tm, path, x)
  # timm's weight standardisation (eps 1e-8 inside the sqrt) and GroupNorm (eps 1e-5) differ
  # from the official (std + 1e-5, eps 1e-6): ~1e-4 on the logits.
  assert np.abs(theirs - ours).max() <= 5e-4


def test_hybrid_r_ti16_at_224_token_count():
  # The official preset has 49 + 1 tokens at 224px, as does timm's vit_tiny_r_s16_p8_224.
  tm = _create('vit_tiny_r_s16_p8_224', 224)
  assert tm.pos_embed.shape == (1, 50, 192)
  assert models.token_grid(models.MODEL_CONFIGS['R+ViT-Ti_16'], (224, 224)) == (7, 7)
