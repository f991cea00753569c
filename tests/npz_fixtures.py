"""Test helpers: random weights written by hand in the published .npz layout.

Every key is spelled out here (not produced by `vit_jax.checkpoint`), so tests that load these
files check the library's name mapping against an independent description of the format.
"""

from typing import Any, Dict, Optional, Tuple

import jax
import numpy as np

# Inside an encoder block: published (pre-Linen) name → Linen name.
BLOCK_NAMES = (
    ('LayerNorm_0', 'LayerNorm_0'),
    ('MultiHeadDotProductAttention_1', 'MultiHeadDotProductAttention_0'),
    ('LayerNorm_2', 'LayerNorm_1'),
    ('MlpBlock_3', 'MlpBlock_0'),
)


def perturb(params: Any, seed: int = 0, scale: float = 0.1) -> Any:
  """Adds N(0, scale) noise to every leaf, so zero-initialised heads/cls become informative."""
  leaves, treedef = jax.tree.flatten(params)
  rng = np.random.default_rng(seed)
  noisy = [np.asarray(x) + scale * rng.standard_normal(np.shape(x)).astype(np.float32)
           for x in leaves]
  return jax.tree.unflatten(treedef, noisy)


def images(n: int, h: int, w: int, seed: int = 0) -> np.ndarray:
  """Random NHWC float32 images in [-1, 1]."""
  return np.random.default_rng(seed).uniform(-1, 1, (n, h, w, 3)).astype(np.float32)


def _set(tree: Dict[str, Any], path: str, value: np.ndarray) -> None:
  *parents, leaf = path.split('/')
  for p in parents:
    tree = tree.setdefault(p, {})
  tree[leaf] = value


class _Builder:
  """Collects (published name, Linen name, array) triples."""

  def __init__(self, seed: int):
    self.rng = np.random.default_rng(seed)
    self.published: Dict[str, np.ndarray] = {}
    self.linen: Dict[str, Any] = {}

  def add(self, published: str, shape: Tuple[int, ...], *, linen: Optional[str] = None,
          linen_shape: Optional[Tuple[int, ...]] = None, std: float = 0.1,
          mean: float = 0.) -> None:
    value = (mean + std * self.rng.standard_normal(shape)).astype(np.float32)
    self.published[published] = value
    _set(self.linen, linen or published, value.reshape(linen_shape or shape))


def published_vit(*, hidden: int, mlp: int, heads: int, layers: int, patch: int,
                  num_tokens: int, num_classes: int, classifier: str = 'token',
                  representation_size: Optional[int] = None, root_width: Optional[int] = None,
                  seed: int = 0) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
  """Random ViT weights: ({published flat name: array}, the same arrays as a Linen tree).

  `root_width` adds a hybrid ResNet root (conv_root + gn_root, (1, 1, 1, C) GroupNorm in the
  published file, (C,) in the Linen tree), as in R+ViT-Ti_16. `num_tokens` counts the class
  token for 'token' classifiers.
  """
  b = _Builder(seed)
  d, hd = hidden, hidden // heads
  in_ch = 3
  if root_width is not None:
    b.add('conv_root/kernel', (7, 7, 3, root_width), std=0.2)
    b.add('gn_root/scale', (1, 1, 1, root_width), linen_shape=(root_width,), mean=1.)
    b.add('gn_root/bias', (1, 1, 1, root_width), linen_shape=(root_width,))
    in_ch = root_width
  b.add('embedding/kernel', (patch, patch, in_ch, d), std=(patch * patch * in_ch)**-0.5)
  b.add('embedding/bias', (d,))
  if classifier in ('token', 'token_unpooled'):
    b.add('cls', (1, 1, d))
  b.add('Transformer/posembed_input/pos_embedding', (1, num_tokens, d))
  for i in range(layers):
    block = f'Transformer/encoderblock_{i}'
    names = {old: f'{block}/{new}' for old, new in BLOCK_NAMES}
    for old in ('LayerNorm_0', 'LayerNorm_2'):
      b.add(f'{block}/{old}/scale', (d,), linen=f'{names[old]}/scale', mean=1.)
      b.add(f'{block}/{old}/bias', (d,), linen=f'{names[old]}/bias')
    mha = 'MultiHeadDotProductAttention_1'
    for proj in ('query', 'key', 'value'):
      b.add(f'{block}/{mha}/{proj}/kernel', (d, heads, hd), linen=f'{names[mha]}/{proj}/kernel',
            std=d**-0.5)
      b.add(f'{block}/{mha}/{proj}/bias', (heads, hd), linen=f'{names[mha]}/{proj}/bias')
    b.add(f'{block}/{mha}/out/kernel', (heads, hd, d), linen=f'{names[mha]}/out/kernel',
          std=d**-0.5)
    b.add(f'{block}/{mha}/out/bias', (d,), linen=f'{names[mha]}/out/bias')
    mlp_name = names['MlpBlock_3']
    b.add(f'{block}/MlpBlock_3/Dense_0/kernel', (d, mlp), linen=f'{mlp_name}/Dense_0/kernel',
          std=d**-0.5)
    b.add(f'{block}/MlpBlock_3/Dense_0/bias', (mlp,), linen=f'{mlp_name}/Dense_0/bias')
    b.add(f'{block}/MlpBlock_3/Dense_1/kernel', (mlp, d), linen=f'{mlp_name}/Dense_1/kernel',
          std=mlp**-0.5)
    b.add(f'{block}/MlpBlock_3/Dense_1/bias', (d,), linen=f'{mlp_name}/Dense_1/bias')
  b.add('Transformer/encoder_norm/scale', (d,), mean=1.)
  b.add('Transformer/encoder_norm/bias', (d,))
  if representation_size is not None:
    b.add('pre_logits/kernel', (d, representation_size), std=d**-0.5)
    b.add('pre_logits/bias', (representation_size,))
    d = representation_size
  b.add('head/kernel', (d, num_classes), std=d**-0.5)
  b.add('head/bias', (num_classes,))
  return b.published, b.linen


def write_npz(path, arrays: Dict[str, np.ndarray]) -> str:
  """Writes `arrays` with `np.savez` exactly as given (flat '/'-joined keys)."""
  path = str(path)
  np.savez(path, **arrays)
  return path if path.endswith('.npz') else path + '.npz'


def timm_swin_state_dict(model_config: Any, num_classes: int, image_size: int,
                         seed: int = 0) -> Dict[str, np.ndarray]:
  """Random weights of a Swin with timm 1.0's names and (out, in) Linear shapes.

  Spelled out from timm's `swin_transformer.py`, not from `families/swin/timm.py`: patch embedding
  conv (C, 3, p, p) + norm; per stage `layers.i.downsample` (stages > 0: norm 4C, reduction
  (2C, 4C) without bias) and blocks (norm1, attn.qkv (3C, C), attn.proj, the bias table of the
  clamped window, norm2, mlp.fc1/fc2); `norm`; `head.fc`.
  """
  rng = np.random.default_rng(seed)
  out: Dict[str, np.ndarray] = {}

  def add(name, shape, mean=0.):
    out[name] = (mean + 0.05 * rng.standard_normal(shape)).astype(np.float32)

  p, c = model_config['patches']['size'][0], model_config['embed_dim']
  side = image_size // p
  add('patch_embed.proj.weight', (c, 3, p, p))
  add('patch_embed.proj.bias', (c,))
  add('patch_embed.norm.weight', (c,), mean=1.)
  add('patch_embed.norm.bias', (c,))
  for stage, (depth, heads) in enumerate(zip(model_config['depths'],
                                             model_config['num_heads'])):
    if stage:
      side = -(-side // 2)
      add(f'layers.{stage}.downsample.norm.weight', (4 * c,), mean=1.)
      add(f'layers.{stage}.downsample.norm.bias', (4 * c,))
      add(f'layers.{stage}.downsample.reduction.weight', (2 * c, 4 * c))
      c *= 2
    window = min(side, model_config['window_size'])
    mlp = int(c * model_config['mlp_ratio'])
    for block in range(depth):
      pre = f'layers.{stage}.blocks.{block}'
      for norm in ('norm1', 'norm2'):
        add(f'{pre}.{norm}.weight', (c,), mean=1.)
        add(f'{pre}.{norm}.bias', (c,))
      add(f'{pre}.attn.relative_position_bias_table', ((2 * window - 1)**2, heads))
      for name, shape in (('attn.qkv', (3 * c, c)), ('attn.proj', (c, c)),
                          ('mlp.fc1', (mlp, c)), ('mlp.fc2', (c, mlp))):
        add(f'{pre}.{name}.weight', shape)
        add(f'{pre}.{name}.bias', shape[:1])
  add('norm.weight', (c,), mean=1.)
  add('norm.bias', (c,))
  add('head.fc.weight', (num_classes, c))
  add('head.fc.bias', (num_classes,))
  return out
