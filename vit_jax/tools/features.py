"""Features of a trained ViT for inspection: images in, embeddings/tokens/attention out.

  python -m vit_jax.features --checkpoint=runs/quickstart/finetune --out=features.npz photos/
  python -m vit_jax.features --checkpoint=ViT-B_16 --out=f.npz --tokens cat.jpg dog.png

The command writes one .npz: `image` (the paths, in order), `pre_logits` (N, width: the
embedding the head sees), `logits` (N, classes; checkpoints with a head) and with `--tokens` the
encoder's output tokens (N, tokens, width). Bad input prints one line, exit 1.

`weights.loading.load_model` reads a checkpoint into the model its shapes describe;
`extract_features` runs that same model and param tree
once with Flax's `capture_intermediates` plus the attention weights each block sows, so the
numbers are exactly those of the forward pass that makes predictions (no second model).

Images are read and preprocessed by `data/image_ops.py`, with the ops of the evaluation input
pipeline (decode to 3-channel RGB, bilinear resize to the square model size, `x / 127.5 - 1`),
so predictions on a file match eval on the same image.
"""

import functools
import os
import sys
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import flax
import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from vit_jax import models_transformer
from vit_jax.families.vit import model as models_vit
from vit_jax.data import image_ops
from vit_jax.data import image_files
from vit_jax.tools import cli
from vit_jax.weights import loading

Params = Dict[str, Any]

_TOKENS = flags.DEFINE_bool('tokens', False, "Also write each image's encoder output tokens "
                            '(N, tokens, width): files many times larger.')
for _name in ('checkpoint', 'model', 'image_size', 'batch_size', 'out'):  # Defined in cli.py.
  flags.declare_key_flag(_name)
FLAG_DEFAULTS = {'batch_size': 16}
FLAG_HELP = {'out': 'The .npz file to write: image (the paths), pre_logits (N, width), logits '
                    '(N, classes; with a head), tokens (with --tokens).',
             'image_size': 'Square input side; default: the resolution the checkpoint was '
                           'trained at (224 if it has no position embeddings).'}


@flax.struct.dataclass
class Features:
  """What one forward pass computed, per image of the batch.

  Attributes:
    logits: (B, num_classes) head outputs, or None for a model without head.
    pre_logits: (B, D) the embedding fed to the head (after `pre_logits` if the model has one).
    tokens: (B, N, D) encoder output (after `encoder_norm`), class token first if any.
    blocks: one (B, N, D) output per encoder block, before `encoder_norm`.
    attention: one (B, heads, N, N) softmax attention matrix per block (rows are queries).
  """

  logits: Optional[jax.Array]
  pre_logits: jax.Array
  tokens: jax.Array
  blocks: Tuple[jax.Array, ...]
  attention: Tuple[jax.Array, ...]


def _capture_filter(module: Any, method_name: str) -> bool:
  return method_name == '__call__' and isinstance(
      module, (models_transformer.Encoder, models_transformer.Encoder1DBlock))


def _features(model: models_vit.VisionTransformer, params: Params,
              images: jax.Array) -> Features:
  logits, state = model.apply({'params': params}, images, train=False,
                              capture_intermediates=_capture_filter, mutable=['intermediates'])
  inter = state['intermediates']
  encoder = inter['Transformer']
  num_blocks = model.transformer['num_layers']
  blocks = [encoder[f'encoderblock_{i}'] for i in range(num_blocks)]
  return Features(
      logits=logits if model.num_classes else None,
      pre_logits=inter['pre_logits'][0],
      tokens=encoder['__call__'][0],
      blocks=tuple(b['__call__'][0] for b in blocks),
      attention=tuple(b['MultiHeadDotProductAttention_0']['attention_weights'][0]
                      for b in blocks))


def make_feature_fn(model: Any) -> Callable[[Params, jax.Array], Features]:
  """A jitted `fn(params, images) -> Features` for `model`; build it once, call it per batch."""
  if not isinstance(model, models_vit.VisionTransformer) or model.transformer is None:
    raise ValueError('Features need a Vision Transformer (ViT or hybrid): a Swin attends '
                     'within shifted windows (no token-to-token map over the image), Mixer and '
                     'ResNet models have no attention to capture.')
  return jax.jit(functools.partial(_features, model))


def extract_features(model: Any, params: Params, images: Any) -> Features:
  """Runs `model` once on NHWC `images` in [-1, 1] and returns every captured feature.

  Args:
    model: a `VisionTransformer` (e.g. `loading.LoadedModel.model` or `models.get_model`).
    params: its Linen param tree (the same one used for predictions).
    images: (B, H, W, 3) float array in [-1, 1] (see `load_images`).

  Returns:
    `Features` with logits, pre-logits embedding, encoder tokens, each block's output and each
    block's attention weights. Compiles per call; use `make_feature_fn` for many batches.
  """
  return make_feature_fn(model)(params, jnp.asarray(images, jnp.float32))


def main(argv: Sequence[str]) -> str:
  """Writes the features of the images (files or folders in argv[1:]) to --out."""
  checkpoint, out, batch_size = cli.CHECKPOINT.value, cli.OUT.value, cli.BATCH_SIZE.value
  if not checkpoint or not out:
    raise ValueError('Pass --checkpoint=PATH_OR_NAME and --out=FILE.npz, then image files or '
                     'folders.')
  if not out.endswith('.npz') or os.path.isdir(out):
    raise ValueError(f'--out={out} must name an .npz file to write, e.g. --out=features.npz.')
  if batch_size < 1:
    raise ValueError('--batch_size must be at least 1.')
  paths = image_files.list_images(argv[1:])
  loaded = loading.load_model(checkpoint, cli.MODEL.value, cli.IMAGE_SIZE.value)
  feature_fn = make_feature_fn(loaded.model)
  names = ['pre_logits'] + ['logits'] * bool(loaded.num_classes) + ['tokens'] * _TOKENS.value
  parts = {name: [] for name in names}
  batch_size = min(batch_size, len(paths))
  for start in range(0, len(paths), batch_size):  # Padded batches: one compilation.
    chunk = paths[start:start + batch_size]
    images = image_ops.load_images(chunk, loaded.image_size, loaded.mean, loaded.std)
    images = np.concatenate([images, np.zeros((batch_size - len(chunk), *images.shape[1:]),
                                              images.dtype)])
    found = feature_fn(loaded.params, jnp.asarray(images))
    for name in names:
      parts[name].append(np.asarray(getattr(found, name))[:len(chunk)])
  arrays = {'image': np.array(paths), **{k: np.concatenate(v) for k, v in parts.items()}}
  _write_npz(out, arrays)
  shapes = ', '.join(f'{k} {v.shape}' for k, v in arrays.items() if k != 'image')
  return f'Wrote {out}: {shapes} for {len(paths)} images.'


def _write_npz(path: str, arrays: Dict[str, np.ndarray]) -> None:
  """`np.savez` to a temporary file, then renamed: a stopped run leaves no half-written file."""
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  tmp = f'{path}.tmp-{os.getpid()}'
  with open(tmp, 'wb') as f:
    np.savez(f, **arrays)
  os.replace(tmp, path)


if __name__ == '__main__':
  cli.run(sys.modules[__name__])
