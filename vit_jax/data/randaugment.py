"""RandAugment (Cubuk et al. 2019) with stateless TF ops, for the train input pipeline.

Each of `num_layers` rounds applies one op drawn uniformly from `OPS` at the shared
`magnitude` (0-10), with a random sign for the signed ops. All randomness comes from the seed
passed in, so augmentation is reproducible and resumable. Kept to the common op set; the
magnitude ranges follow the paper / big_vision (rotate 30°, shear 0.3, translate 1/3 of the side,
enhance factors 1 ± 0.9).
"""

import math
from typing import Callable, List

import tensorflow as tf

MAX_MAGNITUDE = 10.
_GRAY = 128.  # Fill value of pixels moved in from outside by affine ops.

Op = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]  # (image float [h, w, 3] in [0, 255], level).


def _blend(image: tf.Tensor, other: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
  """PIL ImageEnhance semantics: factor 0 = `other`, 1 = `image`, >1 extrapolates."""
  return tf.clip_by_value(other + factor * (image - other), 0., 255.)


def _affine(image: tf.Tensor, transform: List[tf.Tensor]) -> tf.Tensor:
  """Applies a projective transform (output → input coordinates, 8 numbers)."""
  size = tf.shape(image)[:2]
  out = tf.raw_ops.ImageProjectiveTransformV3(
      images=image[None], transforms=tf.cast(tf.stack(transform), tf.float32)[None],
      output_shape=size, fill_value=_GRAY, interpolation='BILINEAR', fill_mode='CONSTANT')
  return out[0]


def _rotate(image: tf.Tensor, level: tf.Tensor) -> tf.Tensor:
  angle = level * 30. * math.pi / 180.
  h, w = (tf.cast(s, tf.float32) for s in tf.unstack(tf.shape(image)[:2]))
  cos, sin = tf.cos(angle), tf.sin(angle)
  x0 = (w - 1) / 2 - (cos * (w - 1) / 2 - sin * (h - 1) / 2)
  y0 = (h - 1) / 2 - (sin * (w - 1) / 2 + cos * (h - 1) / 2)
  return _affine(image, [cos, -sin, x0, sin, cos, y0, 0., 0.])


def _shear_x(image, level):
  return _affine(image, [1., level * 0.3, 0., 0., 1., 0., 0., 0.])


def _shear_y(image, level):
  return _affine(image, [1., 0., 0., level * 0.3, 1., 0., 0., 0.])


def _translate_x(image, level):
  width = tf.cast(tf.shape(image)[1], tf.float32)
  return _affine(image, [1., 0., -level * width / 3., 0., 1., 0., 0., 0.])


def _translate_y(image, level):
  height = tf.cast(tf.shape(image)[0], tf.float32)
  return _affine(image, [1., 0., 0., 0., 1., -level * height / 3., 0., 0.])


def _gray(image: tf.Tensor) -> tf.Tensor:
  return tf.image.grayscale_to_rgb(tf.image.rgb_to_grayscale(image))


OPS: List[Op] = [
    lambda image, level: image,  # Identity.
    lambda image, level: _autocontrast(image),
    _rotate,
    # Solarize: invert pixels above a threshold that falls from 256 to 0 with the magnitude.
    lambda image, level: tf.where(image < 256. * (1. - tf.abs(level)), image, 255. - image),
    # Posterize: keep 8 - 4 * |level| bits.
    lambda image, level: _posterize(image, 8 - tf.cast(tf.round(4. * tf.abs(level)), tf.int32)),
    lambda image, level: _blend(image, _gray(image), 1. + 0.9 * level),  # Color.
    lambda image, level: _blend(image, tf.reduce_mean(_gray(image)), 1. + 0.9 * level),  # Contrast.
    lambda image, level: _blend(image, tf.zeros_like(image), 1. + 0.9 * level),  # Brightness.
    _shear_x,
    _shear_y,
    _translate_x,
    _translate_y,
]


def _autocontrast(image: tf.Tensor) -> tf.Tensor:
  """Stretches each channel to the full 0-255 range (channels that are flat stay)."""
  low = tf.reduce_min(image, axis=[0, 1])
  high = tf.reduce_max(image, axis=[0, 1])
  scale = tf.where(high > low, 255. / tf.maximum(high - low, 1e-6), 1.)
  offset = tf.where(high > low, low, 0.)
  return tf.clip_by_value((image - offset) * scale, 0., 255.)


def _posterize(image: tf.Tensor, bits: tf.Tensor) -> tf.Tensor:
  shift = tf.cast(8 - bits, tf.uint8)
  pixels = tf.cast(tf.clip_by_value(image, 0., 255.), tf.uint8)
  return tf.cast(tf.bitwise.left_shift(tf.bitwise.right_shift(pixels, shift), shift), tf.float32)


def randaugment(image: tf.Tensor, num_layers: int, magnitude: float,
                seed: tf.Tensor) -> tf.Tensor:
  """Applies `num_layers` random ops at `magnitude` (0-10) to a float image in [0, 255].

  Args:
    image: float32 [h, w, 3] with values in [0, 255].
    num_layers: Ops applied in sequence (RandAugment's N).
    magnitude: Shared strength (RandAugment's M), 0-10.
    seed: Stateless seed, shape [2].

  Returns:
    The augmented image, float32 in [0, 255], same shape.
  """
  image = tf.cast(image, tf.float32)
  for layer_seed in tf.unstack(tf.random.experimental.stateless_split(seed, num_layers)):
    op_seed, sign_seed = tf.unstack(tf.random.experimental.stateless_split(layer_seed, 2))
    index = tf.random.stateless_uniform([], op_seed, 0, len(OPS), dtype=tf.int32)
    sign = tf.where(tf.random.stateless_uniform([], sign_seed) < 0.5, -1., 1.)
    level = sign * magnitude / MAX_MAGNITUDE
    image = tf.switch_case(index, [lambda op=op, x=image, lv=level: op(x, lv) for op in OPS])
    image.set_shape([None, None, 3])
  return tf.clip_by_value(image, 0., 255.)
