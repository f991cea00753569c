"""Image ops: which files are images, whether one is complete, decode/resize/normalise.

One implementation for training and the tools: the input pipeline runs `decode`, `resize` and
`make_normalize` as tf.data ops; the tools (predict, features, analyze) run the same ops eagerly
on single files (`read_image`, `preprocess`), so predictions on a file match eval on it bit for
bit. TensorFlow is imported on first use, so the tools' `--help` stays fast.
"""

import functools
import os
import threading
from typing import Callable, Dict, List, Sequence

import numpy as np
from absl import logging

from vit_jax import presets

# Files the tools read as images (by name). Pillow reads those TF cannot (TIFF, 16-bit PNG...).
IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.gif', '.bmp', '.webp', '.tif', '.tiff')
# The files of a dataset folder: those whose completeness `readable` checks before training.
DATASET_EXTENSIONS = IMAGE_EXTENSIONS[:3]
# File signatures of the formats TF decodes (JPEG, PNG, GIF, BMP); others go straight to Pillow
# so TF never logs a C++ warning for a file it cannot read.
_TF_IMAGE_MAGIC = (b'\xff\xd8\xff', b'\x89PNG', b'GIF8', b'BM')
_PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'
_PNG_END = b'\x00\x00\x00\x00IEND\xaeB`\x82'  # The IEND chunk: length 0, type, its fixed CRC.


class ImageError(ValueError):
  """An image file that is missing or cannot be decoded."""


@functools.cache
def _tf():
  """TensorFlow (heavy; imported when an image is first touched) without its C++ log spam."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  import tensorflow as tf
  return tf


def decode(data):
  """Encoded image bytes (tf.string) → uint8 [h, w, 3] as displayed.

  Grayscale is repeated, alpha dropped, 16-bit samples keep their high byte (TF's own
  conversion, x >> 8: within one 8-bit level of x / 65535 · 255), and a JPEG's EXIF
  Orientation is applied (`exif_orientation`), as cameras and phones store portraits.
  """
  tf = _tf()
  image = tf.io.decode_image(data, channels=3, expand_animations=False)
  image.set_shape([None, None, 3])
  return orient(image, exif_orientation(data))


# EXIF Orientation (tag 0x0112) → (transpose, then tf.image.rot90's k, then mirror): 1 upright,
# 2 mirrored, 3 rotated 180, 4 flipped, 5 transposed, 6 rotated 90 CW, 7 transversed, 8 90 CCW.
# The same transforms as Pillow's `ImageOps.exif_transpose` (tested against it).
_ORIENTATIONS = {1: (False, 0, False), 2: (False, 0, True), 3: (False, 2, False),
                 4: (False, 2, True), 5: (True, 0, False), 6: (False, 3, False),
                 7: (True, 2, False), 8: (False, 1, False)}
_EXIF_HEADER = b'Exif\x00\x00'
_EXIF_SEARCH = 65536  # APP1 (where EXIF lives) is one marker segment: at most 64 KiB in.
_MAX_IFD_ENTRIES = 256


def exif_orientation(data):
  """The EXIF Orientation (1-8) of JPEG bytes (tf.string scalar); 1 when there is none.

  Reads the TIFF structure after the first `Exif\0\0` of the APP1 segment: byte order, IFD0,
  then the entry with tag 0x0112 (a SHORT). Anything out of range reads as 1 (upright).
  """
  tf = _tf()
  head = tf.strings.substr(data, 0, _EXIF_SEARCH)
  found = tf.strings.split(head, sep=_EXIF_HEADER, maxsplit=1)
  tiff = tf.strings.length(found[0]) + len(_EXIF_HEADER)
  padded = tf.strings.join([head, bytes(_EXIF_SEARCH + 12 * _MAX_IFD_ENTRIES + 16)])
  little = tf.equal(tf.strings.substr(padded, tiff, 2), b'II')

  def raw(pos, length):
    return tf.cast(tf.io.decode_raw(tf.strings.substr(padded, pos, length), tf.uint8), tf.int32)

  def number(b):  # Bytes along the last axis → an unsigned integer in the file's byte order.
    weights = 256 ** tf.range(tf.shape(b)[-1] - 1, -1, -1)
    return tf.reduce_sum(b * tf.where(little, tf.reverse(weights, [0]), weights), -1)

  ifd = tiff + tf.minimum(number(raw(tiff + 4, 4)), _EXIF_SEARCH)
  count = tf.minimum(number(raw(ifd, 2)), _MAX_IFD_ENTRIES)
  entries = tf.reshape(raw(ifd + 2, 12 * count), [-1, 12])
  match = tf.equal(number(entries[:, :2]), 0x0112)
  value = tf.reduce_max(tf.where(match, number(entries[:, 8:10]), 0))
  valid = tf.logical_and(
      tf.logical_and(tf.equal(tf.strings.substr(data, 0, 2), b'\xff\xd8'),
                     tf.size(found) > 1),
      tf.logical_and(tf.logical_or(little, tf.equal(tf.strings.substr(padded, tiff, 2), b'MM')),
                     tf.logical_and(value >= 1, value <= 8)))
  return tf.where(valid, value, 1)


def orient(image, orientation):
  """`image` (h, w, c) turned upright for EXIF `orientation` (1-8), as Pillow's exif_transpose."""
  tf = _tf()

  def transform(transpose, k, flip):
    def apply():
      x = tf.transpose(image, [1, 0, 2]) if transpose else image
      x = tf.image.rot90(x, k) if k else x
      return tf.reverse(x, [1]) if flip else x  # Mirrored left-right.
    return apply

  return tf.switch_case(orientation - 1, [transform(*_ORIENTATIONS[o]) for o in range(1, 9)])


def resize(image, size: int):
  """Bilinear to [size, size] as float32 in [0, 255], no antialiasing (identity at same size)."""
  return _tf().image.resize(image, [size, size], method='bilinear')


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
  tf = _tf()
  if is_official_normalization(mean, std):
    return lambda image: tf.cast(image, tf.float32) / 127.5 - 1.
  mean32, std32 = tf.constant(mean, tf.float32), tf.constant(std, tf.float32)
  return lambda image: (tf.cast(image, tf.float32) / 255. - mean32) / std32


def read_image(path: str) -> np.ndarray:
  """Decodes an image file to uint8 RGB (H, W, 3), whatever its format or mode.

  TF's decoder (`decode`, what training reads with) comes first, so pixels agree bit for bit
  with eval; Pillow covers what TF cannot read (TIFF, WebP, 16-bit or palette modes TF rejects).

  Raises:
    ImageError: the file is missing or no decoder reads it.
  """
  if not os.path.isfile(path):
    raise ImageError(f'Could not find image "{path}"; check the path.')
  with open(path, 'rb') as f:
    header = f.read(8)
  if header.startswith(_TF_IMAGE_MAGIC):
    tf = _tf()
    try:
      return decode(tf.io.read_file(path)).numpy()
    except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError):
      pass  # E.g. a truncated JPEG; Pillow's error message is the clearer one.
  return _read_image_pil(path)


def _read_image_pil(path: str) -> np.ndarray:
  from PIL import Image, ImageOps, UnidentifiedImageError
  try:
    with Image.open(path) as image:
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


_unreadable_lock = threading.Lock()
_unreadable: Dict[str, set] = {}  # Folder → names of its broken files met by this process.


def readable(data, name):
  """Whether `data` is a whole JPEG, PNG, WebP or BMP (all that TF decodes); logs it if not.

  Bytes after the end are allowed: cameras and phones append trailers (maker notes, a second
  image, a video) after a JPEG's EOI, and some writers pad PNGs; TF decodes both.

  Args:
    data: The file's bytes (tf.string scalar).
    name: Its path (tf.string scalar), for the warning.
  """
  tf = _tf()
  ok = tf.reduce_any(tf.stack([_complete_jpeg(data), _complete_png(data),
                               _complete_webp_or_bmp(data)]))
  return tf.cond(ok, lambda: ok, lambda: tf.numpy_function(_count_unreadable, [name], tf.bool,
                                                           stateful=True))


def _complete_png(data):
  """The signature, then the IEND chunk somewhere (a truncated file lacks it)."""
  tf = _tf()
  signature = tf.equal(tf.strings.substr(data, 0, 8), _PNG_SIGNATURE)
  return tf.logical_and(signature, tf.size(tf.strings.split(data, sep=_PNG_END)) > 1)


def _complete_webp_or_bmp(data):
  """A WebP or BMP (TF decodes them too: web images saved as .jpg often are WebP) holding at
  least the bytes its header declares: RIFF size + 8 (a trailer allowed), BMP size exactly
  (TF rejects a BMP of any other size, so one with extra bytes counts as unreadable too)."""
  tf = _tf()
  size = tf.cast(tf.strings.length(data), tf.int64)
  padded = tf.strings.join([data, bytes(12)])  # Reads past the end see zeros.

  def le32(offset):
    raw = tf.cast(tf.io.decode_raw(tf.strings.substr(padded, offset, 4), tf.uint8), tf.int64)
    return tf.reduce_sum(raw * tf.constant([1, 1 << 8, 1 << 16, 1 << 24], tf.int64))

  webp = tf.logical_and(
      tf.logical_and(tf.equal(tf.strings.substr(padded, 0, 4), b'RIFF'),
                     tf.equal(tf.strings.substr(padded, 8, 4), b'WEBP')),
      size >= le32(4) + 8)
  bmp = tf.logical_and(tf.equal(tf.strings.substr(padded, 0, 2), b'BM'), tf.equal(size, le32(2)))
  return tf.logical_or(webp, bmp)


def _complete_jpeg(data):
  """SOI, the marker segments walked by their lengths up to the first scan (SOS), then an EOI.

  Walking by lengths (as libjpeg reads markers) skips an EXIF thumbnail's own SOS ... EOI, so a
  file cut inside its main scan is caught; anything after the EOI is a trailer and allowed.
  """
  tf = _tf()
  raw = tf.cast(tf.io.decode_raw(data, tf.uint8), tf.int32)
  size = tf.size(raw)
  padded = tf.concat([raw, tf.zeros([4], tf.int32)], 0)  # Reads past the end see zeros.
  byte = lambda i: padded[tf.minimum(i, size + 3)]  # noqa: E731
  soi = tf.equal(tf.strings.substr(data, 0, 3), b'\xff\xd8\xff')

  def at_scan(pos):
    return tf.logical_and(tf.equal(byte(pos), 0xFF), tf.equal(byte(pos + 1), 0xDA))

  def next_marker(pos):
    marker, length = byte(pos + 1), byte(pos + 2) * 256 + byte(pos + 3)
    standalone = tf.logical_or(tf.equal(marker, 0x01),
                               tf.logical_and(marker >= 0xD0, marker <= 0xD7))
    skip = tf.where(tf.logical_or(tf.not_equal(byte(pos), 0xFF), tf.equal(marker, 0xFF)), 1,
                    tf.where(standalone, 2, 2 + length))  # Garbage and fill bytes: one at a time.
    return (pos + skip,)

  (pos,) = tf.while_loop(lambda pos: tf.logical_and(pos + 1 < size, tf.logical_not(at_scan(pos))),
                         next_marker, (tf.where(soi, 2, size),))
  scan = raw[tf.minimum(pos, size):]
  eoi = tf.reduce_any(tf.logical_and(tf.equal(scan[:-1], 0xFF), tf.equal(scan[1:], 0xD9)))
  return tf.logical_and(soi, tf.logical_and(at_scan(pos), eoi))


def _count_unreadable(name: bytes) -> np.bool_:
  """Logs the broken file's name and the count so far (the 1st, 2nd, 4th, 8th... of a folder)."""
  path = name.decode(errors='replace')
  folder = os.path.dirname(os.path.dirname(path))
  with _unreadable_lock:
    seen = _unreadable.setdefault(folder, set())
    new = path not in seen
    seen.add(path)
    count = len(seen)
  if new and count & (count - 1) == 0:
    logging.warning('Skipped %d unreadable image file(s) in %s so far (not a complete '
                    'JPEG/PNG/WebP/BMP), e.g. %s: delete or replace them.', count, folder, path)
  return np.bool_(False)


def is_hidden(name: str) -> bool:
  """A hidden file or folder ('.ipynb_checkpoints', '.DS_Store'): never a class or an image."""
  return name.startswith('.')


def class_folders(directory: str) -> List[str]:
  """The visible sub-folders of `directory`, sorted: an image dataset split's classes."""
  return sorted(e.name for e in os.scandir(directory) if e.is_dir() and not is_hidden(e.name))


def image_files(folder: str, extensions: Sequence[str] = IMAGE_EXTENSIONS) -> List[str]:
  """Image files under `folder` as paths relative to it, sorted; hidden files and folders skipped.

  Recursive, as torchvision's ImageFolder reads a class folder: images in nested sub-folders
  belong to it. Only directories are read (no file is opened). The one listing that training,
  evaluation and the tools (predict, analyze) use.
  """
  found = []
  for root, dirs, names in os.walk(folder, followlinks=True):
    dirs[:] = [d for d in dirs if not is_hidden(d)]  # Pruned: os.walk never enters them.
    rel = os.path.relpath(root, folder)
    found.extend(name if rel == '.' else os.path.join(rel, name) for name in names
                 if not is_hidden(name) and name.lower().endswith(tuple(extensions)))
  return sorted(found)


def list_images(paths: Sequence[str]) -> List[str]:
  """Files named, plus image files in named folders (`image_files`: recursive, sorted)."""
  if not paths:
    raise ValueError('No images given: pass image files or folders after the flags.')
  found = []
  for path in paths:
    if os.path.isdir(path):
      inside = [os.path.join(path, name) for name in image_files(path)]
      if not inside:
        raise ValueError(f'Folder "{path}" has no image files '
                         f'({", ".join(IMAGE_EXTENSIONS)}; hidden files and folders skipped).')
      found.extend(inside)
    elif os.path.isfile(path):
      found.append(path)
    else:
      raise ImageError(f'Could not find image "{path}"; check the path.')
  return found
