"""Features of a trained ViT for inspection: images in, embeddings/tokens/attention out.

`checkpoints.loading.load_model` reads a checkpoint into the model its shapes describe;
`extract_features` runs that same model and param tree
once with Flax's `capture_intermediates` plus the attention weights each block sows, so the
numbers are exactly those of the forward pass that makes predictions (no second model).

Images are read and resized like the evaluation input pipeline (`input_pipeline.py`): decode
to 3-channel RGB, `tf.image.resize` bilinear to the square model size, then
`(x - 127.5) / 127.5`; predictions on a file therefore match eval on the same image.
"""

import functools
import os
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import flax
import jax
import jax.numpy as jnp
import numpy as np

from vit_jax import models_vit
from vit_jax import presets

Params = Dict[str, Any]

IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.gif', '.bmp', '.webp', '.tif', '.tiff')


# File signatures of the formats TF decodes (JPEG, PNG, GIF, BMP); others go straight to Pillow
# so TF never logs a C++ warning for a file it cannot read.
_TF_IMAGE_MAGIC = (b'\xff\xd8\xff', b'\x89PNG', b'GIF8', b'BM')


class ImageError(ValueError):
  """An image file that is missing or cannot be decoded."""


def _tensorflow():
  """Imports TensorFlow (heavy; only the image tools need it) without its C++ warning spam."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  import tensorflow as tf
  return tf


def read_image(path: str) -> np.ndarray:
  """Decodes an image file to uint8 RGB (H, W, 3), whatever its format or mode.

  TensorFlow's decoder comes first because it is the one TFDS (hence the eval pipeline) uses,
  so JPEG pixels agree bit for bit; Pillow covers what TF cannot read (TIFF, WebP, 16-bit
  or palette modes TF rejects).
  """
  if not os.path.isfile(path):
    raise ImageError(f'Could not find image "{path}"; check the path.')
  with open(path, 'rb') as f:
    header = f.read(8)
  if header.startswith(_TF_IMAGE_MAGIC):
    tf = _tensorflow()
    try:
      image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False,
                                 dtype=tf.uint8)
      return image.numpy()
    except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError):
      pass  # E.g. a truncated JPEG; Pillow's error message is the clearer one.
  return _read_image_pil(path)


def _read_image_pil(path: str) -> np.ndarray:
  from PIL import Image, UnidentifiedImageError
  try:
    with Image.open(path) as image:
      image.load()
      if image.mode in ('I;16', 'I;16B', 'I;16L', 'I'):
        # 16-bit grey: scale to 8 bits rather than clip (convert('RGB') would saturate).
        array = np.asarray(image, np.float64)
        image = Image.fromarray(np.round(array * 255. / max(array.max(), 1.)).astype(np.uint8))
      return np.asarray(image.convert('RGB'), np.uint8)
  except (UnidentifiedImageError, OSError, ValueError) as e:
    raise ImageError(f'Could not read image "{path}" ({e}); it is not an image file this tool '
                     'can decode (JPEG, PNG, GIF, BMP, WebP, TIFF).') from None


def preprocess(image: np.ndarray, image_size: int,
               mean: Sequence[float] = presets.OFFICIAL_MEAN,
               std: Sequence[float] = presets.OFFICIAL_STD) -> np.ndarray:
  """uint8 RGB (H, W, 3) → float32 (size, size, 3) in [-1, 1], as the eval pipeline does it.

  Bilinear `tf.image.resize` without antialiasing and without cropping (the official eval
  path resizes the whole image to a square), then `x / 127.5 - 1`. Another `mean`/`std` (of
  the [0, 1] image: a timm checkpoint's config.json) gives `(x / 255 - mean) / std` instead.
  """
  tf = _tensorflow()
  resized = tf.image.resize(image, [image_size, image_size], method='bilinear')
  if tuple(mean) == presets.OFFICIAL_MEAN and \
      tuple(std) == presets.OFFICIAL_STD:
    # x / 127.5 - 1 (= (x - 127.5) / 127.5) in float32, the input pipeline's exact arithmetic.
    return (tf.cast(resized, tf.float32) / 127.5 - 1.).numpy()
  scaled = tf.cast(resized, tf.float32).numpy() / np.float32(255.)
  return ((scaled - np.float32(mean)) / np.float32(std)).astype(np.float32)


def load_images(paths: Sequence[str], image_size: int,
                mean: Sequence[float] = presets.OFFICIAL_MEAN,
                std: Sequence[float] = presets.OFFICIAL_STD) -> np.ndarray:
  """Reads and preprocesses `paths` into one (len(paths), size, size, 3) float32 batch."""
  return np.stack([preprocess(read_image(p), image_size, mean, std) for p in paths])


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
      module, (models_vit.Encoder, models_vit.Encoder1DBlock))


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
    raise ValueError('Features need a Vision Transformer (ViT or hybrid); Mixer and '
                     'ResNet-only models have no attention to capture.')
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
