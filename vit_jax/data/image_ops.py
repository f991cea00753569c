"""Image ops: decode, resize, normalise.

One implementation for training and the tools: the input pipeline runs `decode`, `resize` and
`make_normalize` as tf.data ops; the tools (predict, features, analyze) run the same ops eagerly
on single files (`read_image`, `preprocess`), so predictions on a file match eval on it bit for
bit. TF decodes JPEG, PNG, GIF, BMP and WebP, Pillow the rest (TIFF), in training as in the
tools. TensorFlow is imported on first use, so the tools' `--help` stays fast. Which files are
images is `image_files`; whether one is whole, `image_check`.
"""

import functools
import io
import os
from typing import Any, Callable, Sequence

import numpy as np

from vit_jax import presets

# File signatures of the formats TF decodes (JPEG, PNG, GIF, BMP; WebP is RIFF....WEBP); others
# go straight to Pillow, so TF never logs a C++ warning for a file it cannot read.
TF_IMAGE_MAGIC = (b'\xff\xd8\xff', b'\x89PNG', b'GIF8', b'BM')
RIFF, _WEBP = b'RIFF', b'WEBP'  # At bytes 0 and 8 of a WebP.


class ImageError(ValueError):
  """An image file that is missing or cannot be decoded."""


@functools.cache
def tensorflow():
  """TensorFlow (heavy; imported when an image is first touched) without its C++ log spam."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  import tensorflow as tf
  return tf


def decode(data):
  """Encoded image bytes (tf.string) → uint8 [h, w, 3] as displayed.

  Grayscale is repeated, alpha dropped, 16-bit samples keep their high byte (TF's own
  conversion, x >> 8: within one 8-bit level of x / 65535 · 255), and a JPEG's EXIF
  Orientation is applied (`exif_orientation`), as cameras and phones store portraits. TF
  decodes what it can (JPEG, PNG, GIF's first frame, BMP, WebP); Pillow the rest (TIFF),
  as `read_image` does.
  """
  tf = tensorflow()
  image = tf.cond(_tf_decodes(data),
                  lambda: tf.io.decode_image(data, channels=3, expand_animations=False),
                  lambda: tf.numpy_function(_pillow_pixels, [data], tf.uint8, stateful=False))
  image.set_shape([None, None, 3])
  return orient(image, exif_orientation(data))


def _tf_decodes(data):
  """Whether bytes (tf.string) start as a format TF decodes (`TF_IMAGE_MAGIC`, WebP)."""
  tf = tensorflow()
  head = tf.strings.join([tf.strings.substr(data, 0, 12), bytes(12)])  # Short files: zeros.
  known = [tf.equal(tf.strings.substr(head, 0, len(magic)), magic) for magic in TF_IMAGE_MAGIC]
  webp = tf.logical_and(tf.equal(tf.strings.substr(head, 0, 4), RIFF),
                        tf.equal(tf.strings.substr(head, 8, 4), _WEBP))
  return tf.reduce_any(tf.stack(known + [webp]))


def _tf_decodes_header(header: bytes) -> bool:
  """`_tf_decodes` on a file's first 12 bytes, in Python."""
  return header.startswith(TF_IMAGE_MAGIC) or (header[:4] == RIFF and header[8:12] == _WEBP)


def _pillow_pixels(data: Any) -> np.ndarray:
  """`decode`'s Pillow path (a tf.numpy_function): bytes → uint8 (h, w, 3)."""
  data = data.item() if isinstance(data, np.ndarray) else bytes(data)  # numpy_function: 0-d.
  return pillow_decode(data, 'the image')


# EXIF Orientation (tag 0x0112) → (transpose, flip rows, flip columns), applied in that order:
# 1 upright, 2 mirrored, 3 rotated 180, 4 flipped, 5 transposed, 6 rotated 90° clockwise,
# 7 transversed, 8 rotated 90° counter-clockwise: Pillow's `ImageOps.exif_transpose` (tested).
_ORIENTATIONS = ((0, 0, 0), (0, 0, 1), (0, 1, 1), (0, 1, 0), (1, 0, 0), (1, 0, 1), (1, 1, 1),
                 (1, 1, 0))
_EXIF_HEADER = b'Exif\x00\x00'
_EXIF_SEARCH = 65536  # APP1 (where EXIF lives) sits among the first marker segments.
_MAX_IFD_ENTRIES = 256


def exif_orientation(data):
  """The EXIF Orientation (1-8) of JPEG bytes (tf.string scalar); 1 when there is none.

  One op (`jpeg_orientation` on the first 64 KiB): a parse in TF ops costs tens of small ops
  per image, more than the decode on a busy CPU. It runs only for a JPEG whose first 64 KiB
  hold `Exif\0\0` (the answer is 1 without them): a Python call per image takes the GIL from
  the train loop, and for every image it made the quickstart's input pipeline (PNGs) 2.2x
  slower (docs/performance.md, "The quickstart's input pipeline").
  """
  tf = tensorflow()
  head = tf.strings.substr(data, 0, _EXIF_SEARCH)

  def parse():
    orientation = tf.numpy_function(jpeg_orientation, [head], tf.int32, stateful=False)
    orientation.set_shape([])
    return orientation

  def if_exif():  # Exif\0\0 somewhere in the head: the only case `jpeg_orientation` reads.
    return tf.cond(tf.size(tf.strings.split(head, _EXIF_HEADER)) > 1, parse,
                   lambda: tf.constant(1, tf.int32))

  return tf.cond(tf.equal(tf.strings.substr(head, 0, 2), b'\xff\xd8'), if_exif,
                 lambda: tf.constant(1, tf.int32))


def jpeg_orientation(head: Any) -> np.int32:
  """The EXIF Orientation of a JPEG from its first bytes; 1 (upright) without one.

  Walks the marker segments by their lengths to the APP1 segment that starts with
  `Exif\0\0` (stopping at the first scan), then reads its TIFF structure: byte order, IFD0,
  the entry with tag 0x0112 (a SHORT). Anything malformed or out of range reads as 1.
  """
  head = head.item() if isinstance(head, np.ndarray) else bytes(head)  # numpy_function: 0-d.
  pos = 2 if head[:2] == b'\xff\xd8' else len(head)
  while pos + 4 <= len(head) and head[pos] == 0xFF and head[pos + 1] != 0xDA:
    length = int.from_bytes(head[pos + 2:pos + 4], 'big')
    if head[pos + 1] == 0xE1 and head[pos + 4:pos + 10] == _EXIF_HEADER:
      return np.int32(_tiff_orientation(head[pos + 10:pos + 2 + length]))
    pos += 2 + length
  return np.int32(1)


def _tiff_orientation(tiff: bytes) -> int:
  """Tag 0x0112 of IFD0 of a TIFF structure; 1 if absent or invalid."""
  order = {b'II': 'little', b'MM': 'big'}.get(tiff[:2])
  if order is None or len(tiff) < 8:
    return 1
  ifd = int.from_bytes(tiff[4:8], order)
  count = int.from_bytes(tiff[ifd:ifd + 2], order) if ifd + 2 <= len(tiff) else 0
  for start in range(ifd + 2, ifd + 2 + 12 * min(count, _MAX_IFD_ENTRIES), 12):
    entry = tiff[start:start + 12]
    if len(entry) == 12 and int.from_bytes(entry[:2], order) == 0x0112:
      value = int.from_bytes(entry[8:10], order)
      return value if 1 <= value <= 8 else 1
  return 1


def orient(image, orientation):
  """`image` (h, w, c) turned upright for EXIF `orientation` (1-8), as Pillow's exif_transpose.

  Upright images pass through untouched; the others are transposed and flipped as the table
  `_ORIENTATIONS` says (gathers of the row and column indices).
  """
  tf = tensorflow()

  def turn():
    transpose, flip_rows, flip_cols = tf.unstack(
        tf.gather(tf.constant(_ORIENTATIONS) > 0, tf.clip_by_value(orientation, 1, 8) - 1))
    turned = tf.transpose(image, tf.where(transpose, [1, 0, 2], [0, 1, 2]))
    shape = tf.shape(turned)
    turned = tf.gather(turned, _indices(shape[0], flip_rows), axis=0)
    return tf.gather(turned, _indices(shape[1], flip_cols), axis=1)

  return tf.cond(tf.equal(orientation, 1), lambda: image, turn)


def _indices(size, flip):
  """0 .. size - 1, reversed when `flip`."""
  tf = tensorflow()
  return tf.where(flip, tf.range(size - 1, -1, -1), tf.range(size))


_CROP_MARGIN = 2  # Pixels decoded beyond each side of a JPEG window (`decode_window`).


def decode_window(data, window: Callable):
  """`decode` then a crop, decoding only the crop where it can: the same pixels either way.

  `window(shape)` maps the displayed image's shape [h, w, 3] (int32) to the crop's (begin,
  size), as `tf.slice` takes them ([y, x, 0], [h, w, 3]). An upright JPEG (no EXIF rotation) is
  decoded inside the window only (`tf.image.decode_and_crop_jpeg`: libjpeg skips the rows
  above and below and the columns beside it); other files are decoded whole, then sliced.
  """
  tf = tensorflow()

  def jpeg_window():
    shape = tf.concat([tf.image.extract_jpeg_shape(data)[:2], [3]], 0)
    begin, size = window(shape)
    # libjpeg takes a window's edges for the image's: chroma upsampled there (4:2:0, 4:2:2)
    # would lack its neighbours, so a margin is decoded too and cut off.
    wide_begin = tf.maximum(begin[:2] - _CROP_MARGIN, 0)
    wide_size = tf.minimum(begin[:2] + size[:2] + _CROP_MARGIN, shape[:2]) - wide_begin
    image = tf.image.decode_and_crop_jpeg(data, tf.concat([wide_begin, wide_size], 0),
                                          channels=3)
    image = tf.slice(image, tf.concat([begin[:2] - wide_begin, [0]], 0), size)
    image.set_shape([None, None, 3])
    return image

  def whole():
    image = decode(data)
    begin, size = window(tf.shape(image))
    return tf.slice(image, begin, size)

  upright_jpeg = tf.logical_and(tf.equal(tf.strings.substr(data, 0, 3), TF_IMAGE_MAGIC[0]),
                                tf.equal(exif_orientation(data), 1))
  return tf.cond(upright_jpeg, jpeg_window, whole)


def resize(image, size: int):
  """Bilinear to [size, size] as float32 in [0, 255], no antialiasing (identity at same size)."""
  return tensorflow().image.resize(image, [size, size], method='bilinear')


def is_official_normalization(mean: Sequence[float], std: Sequence[float]) -> bool:
  """Whether (mean, std) is the official 0.5/0.5, i.e. inputs in [-1, 1]."""
  return tuple(mean) == presets.OFFICIAL_MEAN and tuple(std) == presets.OFFICIAL_STD


def make_normalize(mean: Sequence[float], std: Sequence[float]) -> Callable:
  """uint8-valued image → float32 model input, (x / 255 - mean) / std per channel.

  The official 0.5/0.5 keeps its exact float32 arithmetic `x / 127.5 - 1`, so default runs are
  bit-identical to the official pipeline.

  Raises:
    ValueError: unless mean and std are 3 values each and std > 0.
  """
  if len(mean) != 3 or len(std) != 3 or not all(s > 0 for s in std):
    raise ValueError(f'config.pp.mean={tuple(mean)} / pp.std={tuple(std)} must be 3 values (RGB) '
                     'each, std > 0, e.g. --config.pp.mean="(0.485, 0.456, 0.406)".')
  tf = tensorflow()
  if is_official_normalization(mean, std):
    return lambda image: tf.cast(image, tf.float32) / 127.5 - 1.
  mean32, std32 = tf.constant(mean, tf.float32), tf.constant(std, tf.float32)
  return lambda image: (tf.cast(image, tf.float32) / 255. - mean32) / std32


def to_uint8(image):
  """A [0, 255]-valued image → uint8, rounded to the nearest level (`pp.uint8_batches`)."""
  tf = tensorflow()
  return tf.cast(tf.clip_by_value(tf.round(tf.cast(image, tf.float32)), 0., 255.), tf.uint8)


def device_normalize(mean: Sequence[float], std: Sequence[float]) -> Callable:
  """`make_normalize` in jax.numpy, for uint8 batches inside the jitted train step."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top  # Only the train step's.
  if is_official_normalization(mean, std):
    return lambda image: image.astype(jnp.float32) / 127.5 - 1.
  mean32, std32 = np.asarray(mean, np.float32), np.asarray(std, np.float32)
  return lambda image: (image.astype(jnp.float32) / 255. - mean32) / std32


def read_image(path: str) -> np.ndarray:
  """Decodes an image file to uint8 RGB (H, W, 3), whatever its format or mode.

  TF's decoder (`decode`, what training reads with) comes first, so pixels agree bit for bit
  with eval; Pillow covers what TF cannot read (TIFF, WebP, 16-bit or palette modes TF rejects).

  Raises:
    ImageError: the file is missing or no decoder reads it.
  """
  if not os.path.isfile(path):
    raise ImageError(f'Could not find image "{path}"; check the path.')
  try:
    with open(path, 'rb') as f:
      data = f.read()
  except OSError as e:
    raise ImageError(f'Could not read image "{path}" ({e.strerror}); check its permissions.'
                     ) from None
  if _tf_decodes_header(data[:12]):
    tf = tensorflow()
    try:
      return decode(tf.constant(data)).numpy()
    except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError):
      pass  # E.g. a truncated JPEG; Pillow's error message is the clearer one.
  return pillow_decode(data, path)


def pillow_decode(data: bytes, path: str) -> np.ndarray:
  """Pillow's uint8 RGB (h, w, 3) of an image file's bytes, as `decode` reads it.

  Raises:
    ImageError: Pillow cannot decode it (`path` names it).
  """
  from PIL import Image, ImageOps, UnidentifiedImageError
  try:
    with Image.open(io.BytesIO(data)) as image:
      image.load()
      image = ImageOps.exif_transpose(image)  # A TIFF's Orientation tag, as `decode` a JPEG's.
      if image.mode.startswith('I;16') or image.mode == 'I':
        image = Image.fromarray(_high_byte(image, path))
      return np.asarray(image.convert('RGB'), np.uint8)
  except (UnidentifiedImageError, OSError, ValueError) as e:
    raise ImageError(f'Could not read image "{path}" ({e}); it is not an image file this tool '
                     'can decode (JPEG, PNG, GIF, BMP, WebP, TIFF).') from None


def _high_byte(image, path: str) -> np.ndarray:
  """A 16-bit grey image → uint8 as TF's PNG decoder converts (x >> 8), so a 16-bit TIFF and
  a 16-bit PNG of the same picture give the same pixels (convert('RGB') would saturate)."""
  bits = getattr(image, 'tag_v2', {}).get(258, (16,))
  if image.mode == 'I' and tuple(bits)[0] != 16:
    raise ImageError(f'Could not read image "{path}": {tuple(bits)[0]}-bit integer samples; '
                     'save it with 8 or 16 bits per sample.')
  return (np.asarray(image).astype(np.int64) >> 8).clip(0, 255).astype(np.uint8)


def preprocess(image: np.ndarray, image_size: int,
               mean: Sequence[float] = presets.OFFICIAL_MEAN,
               std: Sequence[float] = presets.OFFICIAL_STD) -> np.ndarray:
  """uint8 RGB (H, W, 3) → float32 (size, size, 3), exactly as the eval pipeline does it.

  `resize` (the whole image to a square, no crop, as the official eval) then `make_normalize`:
  [-1, 1] by default; another `mean`/`std` of the [0, 1] image (a timm checkpoint's
  config.json) gives `(x / 255 - mean) / std`.
  """
  return make_normalize(mean, std)(resize(image, image_size)).numpy()


def load_images(paths: Sequence[str], image_size: int,
                mean: Sequence[float] = presets.OFFICIAL_MEAN,
                std: Sequence[float] = presets.OFFICIAL_STD) -> np.ndarray:
  """Reads and preprocesses `paths` into one (len(paths), size, size, 3) float32 batch."""
  return np.stack([preprocess(read_image(p), image_size, mean, std) for p in paths])
