"""Whether an image file is whole: the input pipeline's check before it decodes one.

A file cut short (an interrupted copy or download) or not an image at all is skipped with a
counted warning instead of failing the run. JPEG, PNG, WebP and BMP are checked in TF ops; the
rest is decoded by Pillow to tell.
"""

import os
import threading
from typing import Any, Dict

import numpy as np
from absl import logging

from vit_jax.data import image_ops

_PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'
_PNG_END = b'\x00\x00\x00\x00IEND\xaeB`\x82'  # The IEND chunk: length 0, type, its fixed CRC.
_unreadable_lock = threading.Lock()
_unreadable: Dict[str, set] = {}  # Folder → names of its broken files met by this process.


def readable(data, name):
  """Whether `data` is a whole image file that `decode` reads; logs it if not.

  A JPEG, PNG, WebP or BMP is checked in TF ops (complete up to its end); any other file (GIF,
  TIFF, or no image at all) is decoded by Pillow to tell (`_readable_by_pillow`). Bytes after
  the end are allowed: cameras and phones append trailers (maker notes, a second image, a
  video) after a JPEG's EOI, and some writers pad PNGs; TF decodes both.

  Args:
    data: The file's bytes (tf.string scalar).
    name: Its path (tf.string scalar), for the warning.
  """
  tf = image_ops.tensorflow()
  # Only the check of the file's own format runs (each reads the whole file).
  jpeg, png = image_ops.TF_IMAGE_MAGIC[:2]
  ok = tf.cond(tf.equal(tf.strings.substr(data, 0, 3), jpeg),
               lambda: _complete_jpeg(data),
               lambda: tf.cond(tf.equal(tf.strings.substr(data, 0, 4), png),
                               lambda: _complete_png(data),
                               lambda: _complete_webp_or_bmp(data)))
  return tf.cond(ok, lambda: ok, lambda: tf.numpy_function(_readable_by_pillow, [data, name],
                                                           tf.bool, stateful=True))


def _readable_by_pillow(data: Any, name: bytes) -> np.bool_:
  """A file the TF checks refused: a GIF or TIFF Pillow decodes is whole; else it is counted."""
  data = data.item() if isinstance(data, np.ndarray) else bytes(data)
  checked = (b'\xff\xd8\xff', b'\x89PNG', b'BM', image_ops.RIFF)  # By TF ops: broken.
  if not data[:12].startswith(checked):
    try:
      image_ops.pillow_decode(data, '')
      return np.bool_(True)
    except image_ops.ImageError:
      pass
  return _count_unreadable(name)


def _complete_png(data):
  """The signature, then the IEND chunk somewhere (a truncated file lacks it)."""
  tf = image_ops.tensorflow()
  signature = tf.equal(tf.strings.substr(data, 0, 8), _PNG_SIGNATURE)
  return tf.logical_and(signature, tf.size(tf.strings.split(data, sep=_PNG_END)) > 1)


def _complete_webp_or_bmp(data):
  """A WebP or BMP (TF decodes them too: web images saved as .jpg often are WebP) holding at
  least the bytes its header declares: RIFF size + 8 (a trailer allowed), BMP size exactly
  (TF rejects a BMP of any other size, so one with extra bytes counts as unreadable too)."""
  tf = image_ops.tensorflow()
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
  Each step reads 4 bytes and the EOI is a substring search: no op touches the file byte by
  byte (as int32 tensors of the whole file, it cost as much CPU as the decode).
  """
  tf = image_ops.tensorflow()
  size = tf.strings.length(data)
  padded = tf.strings.join([data, bytes(4)])  # Reads past the end see zeros.

  def bytes_at(pos):  # The 4 bytes at `pos` (clamped to the padding), as int32.
    chunk = tf.strings.substr(padded, tf.minimum(pos, size), 4)
    return tf.cast(tf.io.decode_raw(chunk, tf.uint8), tf.int32)

  def at_scan(pos):
    head = bytes_at(pos)
    return tf.logical_and(tf.equal(head[0], 0xFF), tf.equal(head[1], 0xDA))

  def next_marker(pos):
    head = bytes_at(pos)
    marker, length = head[1], head[2] * 256 + head[3]
    standalone = tf.logical_or(tf.equal(marker, 0x01),
                               tf.logical_and(marker >= 0xD0, marker <= 0xD7))
    skip = tf.where(tf.logical_or(tf.not_equal(head[0], 0xFF), tf.equal(marker, 0xFF)), 1,
                    tf.where(standalone, 2, 2 + length))  # Garbage and fill bytes: one at a time.
    return (pos + skip,)

  soi = tf.equal(tf.strings.substr(data, 0, 3), b'\xff\xd8\xff')
  (pos,) = tf.while_loop(lambda pos: tf.logical_and(pos + 1 < size, tf.logical_not(at_scan(pos))),
                         next_marker, (tf.where(soi, 2, size),))
  scan = tf.strings.substr(data, tf.minimum(pos, size), size)
  eoi = tf.size(tf.strings.split(scan, sep=b'\xff\xd9')) > 1
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
    logging.warning('Skipped %d unreadable image file(s) in %s so far (cut short, or not an '
                    'image file), e.g. %s: delete or replace them.', count, folder, path)
  return np.bool_(False)
