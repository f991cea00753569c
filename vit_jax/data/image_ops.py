"""Image ops: which files are images, whether one is complete, decode/resize/normalise.

One implementation for training and the tools: the input pipeline runs `decode`, `resize` and
`make_normalize` as tf.data ops; the tools (predict, features, analyze) run the same ops eagerly
on single files (`read_image`, `preprocess`), so predictions on a file match eval on it bit for
bit. TensorFlow is imported on first use, so the tools' `--help` stays fast.
"""

import functools
import os
import threading
from typing import Any, Callable, Dict, List, Sequence

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
  per image, more than the decode on a busy CPU.
  """
  tf = _tf()
  orientation = tf.numpy_function(jpeg_orientation, [tf.strings.substr(data, 0, _EXIF_SEARCH)],
                                  tf.int32, stateful=False)
  orientation.set_shape([])
  return orientation


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
  tf = _tf()

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
  tf = _tf()
  return tf.where(flip, tf.range(size - 1, -1, -1), tf.range(size))


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
