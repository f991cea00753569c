"""timm (PyTorch, CPU) reads the .npz files `checkpoint.save` writes and computes the same logits.

The timm model is derived from the file alone (`architecture.architecture` →
`timm_model_args` below), never named by hand.

timm is an independent implementation of the published format and of the models, so this pins
both our file layout (pre-Linen names, (1, 1, 1, C) GroupNorm) and our numerics.

timm runs in a child process: importing torch (its triton plugin) after TensorFlow, which other
test modules import, crashes the interpreter with a segmentation fault.
"""

import json
import subprocess
import sys
from typing import Any, Dict, Tuple

import jax
import numpy as np
import pytest

from npz_fixtures import images, perturb
from vit_jax import checkpoint
from vit_jax import models
from vit_jax import presets
from vit_jax.weights import npz_format
from vit_jax.weights import metadata as metadata_lib
from vit_jax.weights import architecture

NUM_CLASSES = 7

_TIMM_SCRIPT = r'''
import json, sys
import numpy as np
try:
  import timm
  import torch
except ImportError as e:
  print(json.dumps({'import_error': repr(e)}))
  sys.exit(0)
spec = json.loads(sys.argv[1])
torch.set_num_threads(2)
# kwargs from timm_model_args (incl. act_layer='gelu_tanh': timm defaults to the
# exact erf GELU, the official models use the tanh approximation).
model = timm.create_model(spec['name'], pretrained=False, **spec['kwargs'])
model.load_pretrained(spec['npz'])
model.eval()
x = torch.from_numpy(np.load(spec['images']).transpose(0, 3, 1, 2).copy())
with torch.no_grad():
  np.save(spec['logits'], model(x).numpy())
print(json.dumps({
    'pos_embed': list(model.pos_embed.shape),
    'grid': list(model.patch_embed.grid_size),
    'num_params': sum(p.numel() for p in model.parameters()),
}))
'''


# timm models of the official hybrids (their ResNet stems are not built from keyword arguments).
_TIMM_HYBRIDS = {'R+ViT-Ti_16': 'vit_tiny_r_s16_p8_224', 'R50+ViT-B_16': 'vit_base_r50_s16_224',
                 'R26+ViT-S_32': 'vit_small_r26_s32_224', 'R26+ViT-B_32': 'vit_base_r26_s32_224',
                 'R50+ViT-L_32': 'vit_large_r50_s32_224'}


def timm_model_args(arch: architecture.Architecture) -> Tuple[str, Dict[str, Any]]:
  """(name, kwargs) for `timm.create_model(name, **kwargs)` to rebuild `arch` in PyTorch.

  timm's own `load_pretrained(npz)` then reads the file. Plain ViTs of any shape are timm's
  ViT-B/16 entry with every width overridden; hybrids must be official presets. Only these
  tests need it (vit_jax writes timm hub folders instead: `weights.timm_export`).

  Raises:
    CheckpointError: for what timm's npz loader cannot represent (pre_logits, Mixer,
      non-learned position embeddings, unpooled classifiers, custom hybrids).
  """
  config = arch.config
  kwargs: Dict[str, Any] = dict(num_classes=arch.num_classes, act_layer='gelu_tanh')
  if arch.image_size:
    kwargs['img_size'] = arch.image_size
  problem = ('Mixer' if presets.family_of(config) == 'mixer' else
             'Swin (timm reads its own .safetensors, see vit_jax/families/swin/timm.py)'
             if presets.family_of(config) == 'swin' else
             'pre_logits' if config.representation_size is not None else
             f'posemb {config.posemb}' if config.posemb != 'learn' else
             f'classifier {config.classifier}' if config.classifier not in ('token', 'gap')
             else None)
  if problem is None and 'resnet' in config and config.resnet is not None:
    if config.model_name not in _TIMM_HYBRIDS:
      problem = f'custom hybrid {config.model_name}'
    else:
      return _TIMM_HYBRIDS[config.model_name], kwargs
  if problem:
    raise checkpoint.CheckpointError(
        f'timm\'s npz loader cannot represent this checkpoint ({problem}).')
  t = config.transformer
  kwargs.update(patch_size=config.patches.size[0], embed_dim=config.hidden_size,
                depth=t.num_layers, num_heads=t.num_heads, mlp_ratio=t.mlp_dim / config.hidden_size,
                class_token=config.classifier == 'token', fc_norm=False,
                global_pool='token' if config.classifier == 'token' else 'avg')
  return 'vit_base_patch16_224', kwargs


def _ours(model, size, tmp_path, seed):
  x = images(2, size, size, seed=seed)
  params = model.init(jax.random.key(seed), x[:1], train=False)['params']
  # Random, non-zero weights everywhere (incl. head, cls, zero-init GroupNorm scales).
  params = perturb(params, seed=seed, scale=0.05)
  path = checkpoint.save(params, str(tmp_path / 'ours.npz'))
  logits = np.asarray(model.apply({'params': params}, x, train=False))
  assert np.abs(logits).max() > 1e-2
  return path, x, logits


def _timm(npz, x, tmp_path, expected_name=None):
  """Runs timm on `x` with the weights of `npz`, the model derived from the file's shapes."""
  arch = architecture.architecture(npz_format.read_npz(npz))
  name, kwargs = timm_model_args(arch)
  assert expected_name is None or name == expected_name
  assert kwargs['num_classes'] == NUM_CLASSES and kwargs['img_size'] == x.shape[1]
  np.save(tmp_path / 'images.npy', x)
  spec = dict(name=name, kwargs=kwargs, npz=npz, images=str(tmp_path / 'images.npy'),
              logits=str(tmp_path / 'timm_logits.npy'))
  run = subprocess.run([sys.executable, '-c', _TIMM_SCRIPT, json.dumps(spec)],
                       capture_output=True, text=True, timeout=300, check=False)
  assert run.returncode == 0, run.stderr[-3000:]
  facts = json.loads(run.stdout.strip().splitlines()[-1])
  if 'import_error' in facts:
    pytest.skip(f'timm interop needs timm and torch (pip install .[test]): '
                f'{facts["import_error"]}')
  return np.load(tmp_path / 'timm_logits.npy'), facts


def _num_params(npz):
  return sum(a.size for a in npz_format.read_npz(npz).values())


def test_vit_ti16(tmp_path):
  size = 64
  model = models.get_model('ViT-Ti_16', num_classes=NUM_CLASSES)
  path, x, ours = _ours(model, size, tmp_path, seed=0)
  theirs, facts = _timm(path, x, tmp_path)
  assert facts['pos_embed'] == [1, 1 + (size // 16)**2, 192]
  assert facts['num_params'] == _num_params(path)
  assert np.abs(theirs - ours).max() <= 1e-4


def test_exported_file_with_embedded_description(tmp_path):
  """An export carries its description in the zip comment; timm's loader reads it unchanged."""
  size = 64
  model = models.get_model('ViT-Ti_16', num_classes=NUM_CLASSES)
  path, x, ours = _ours(model, size, tmp_path, seed=3)
  params = checkpoint.load(path)
  description = metadata_lib.describe_run(
      model_config=models.get_config('ViT-Ti_16'), image_size=size, class_names=None,
      dataset='folder', num_classes=NUM_CLASSES)
  described = checkpoint.save(params, str(tmp_path / 'described.npz'), metadata=description)
  assert metadata_lib.embedded_metadata(described)['image_size'] == size
  theirs, facts = _timm(described, x, tmp_path)
  assert facts['num_params'] == _num_params(described)
  assert np.abs(theirs - ours).max() <= 1e-4


def test_gap(tmp_path):
  size = 64
  model = models.get_model('ViT-S_16-gap-norep', num_classes=NUM_CLASSES)
  path, x, ours = _ours(model, size, tmp_path, seed=1)
  assert 'cls' not in npz_format.read_npz(path)
  theirs, facts = _timm(path, x, tmp_path)
  assert facts['pos_embed'] == [1, (size // 16)**2, 384]
  assert facts['num_params'] == _num_params(path)
  assert np.abs(theirs - ours).max() <= 1e-4


def test_hybrid_r_ti16(tmp_path):
  # R+ViT-Ti_16: ResNet root (/4) then 8x8 patches → effective /32; 64px → 2x2 tokens + cls.
  size = 64
  model = models.get_model('R+ViT-Ti_16', num_classes=NUM_CLASSES)
  path, x, ours = _ours(model, size, tmp_path, seed=2)
  flat = npz_format.read_npz(path)
  assert flat['gn_root/scale'].shape == (1, 1, 1, 64)
  theirs, facts = _timm(path, x, tmp_path, 'vit_tiny_r_s16_p8_224')
  grid = models.token_grid(models.MODEL_CONFIGS['R+ViT-Ti_16'], (size, size))
  assert tuple(facts['grid']) == grid == (2, 2)
  assert tuple(facts['pos_embed']) == flat['Transformer/posembed_input/pos_embedding'].shape
  assert facts['num_params'] == _num_params(path)
  # timm's weight standardisation (eps 1e-8 inside the sqrt) and GroupNorm (eps 1e-5) differ
  # from the official (std + 1e-5, eps 1e-6): ~1e-5 here, up to ~1e-4 on other weights.
  assert np.abs(theirs - ours).max() <= 5e-4


def test_hybrid_r_ti16_token_count_at_224(tmp_path):
  # The official preset has 7x7 + 1 tokens at 224px, as does timm's vit_tiny_r_s16_p8_224.
  assert models.token_grid(models.MODEL_CONFIGS['R+ViT-Ti_16'], (224, 224)) == (7, 7)
  abstract = jax.eval_shape(
      lambda: models.get_model('R+ViT-Ti_16', num_classes=NUM_CLASSES).init(
          jax.random.key(0), np.zeros((1, 224, 224, 3), np.float32), train=False))
  pos = abstract['params']['Transformer']['posembed_input']['pos_embedding'].shape
  path = str(tmp_path / 'zeros.npz')
  checkpoint.save(jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), abstract['params']), path)
  _, facts = _timm(path, np.zeros((1, 224, 224, 3), np.float32), tmp_path,
                   'vit_tiny_r_s16_p8_224')
  assert tuple(facts['pos_embed']) == pos == (1, 50, 192)
  assert tuple(facts['grid']) == (7, 7)
