"""Stage 1 of benchmarks/gpu_e2e.py: a folder of generated JPEGs for `vit_jax.main` to train on.

Camera-sized JPEGs (500x375 by default) make the input pipeline decode, resize and crop as it
would on a photo folder, so the end-to-end figure includes the host's share. Each class is a
few smooth random textures tinted by the class; each file is a random window of one, maybe
flipped, plus noise, so classes are learnable and no two files are equal.
"""

import functools
import multiprocessing
import os
import tempfile
from typing import List, Sequence

import numpy as np

TEXTURES_PER_CLASS = 3


def _texture(cls: int, index: int, size: Sequence[int]) -> np.ndarray:
  """A smooth random pattern, 20% larger than `size`, tinted by the class (uint8 HxWx3)."""
  from PIL import Image  # noqa: PLC0415
  rng = np.random.default_rng([cls, index])
  width, height = (int(s * 1.2) for s in size)
  coarse = rng.uniform(0, 255, (max(height // 24, 2), max(width // 24, 2), 3))
  coarse = 0.6 * coarse + 0.4 * np.random.default_rng(cls).uniform(0, 255, 3)
  big = Image.fromarray(coarse.astype(np.uint8)).resize((width, height), Image.BICUBIC)
  return np.asarray(big)


@functools.lru_cache(maxsize=None)
def _cached_texture(cls: int, index: int, size: tuple) -> np.ndarray:
  return _texture(cls, index, size)


def _write_jpeg(job: tuple) -> None:
  """One JPEG: a random window of one of its class's textures, maybe flipped, plus noise."""
  from PIL import Image  # noqa: PLC0415
  path, cls, seed, size = job
  rng = np.random.default_rng(seed)
  texture = _cached_texture(cls, int(rng.integers(TEXTURES_PER_CLASS)), size)
  top = int(rng.integers(texture.shape[0] - size[1] + 1))
  left = int(rng.integers(texture.shape[1] - size[0] + 1))
  image = texture[top:top + size[1], left:left + size[0]].astype(np.int16)
  image = image + rng.integers(-10, 11, image.shape, dtype=np.int16)
  if rng.integers(2):
    image = image[:, ::-1]
  Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(path, quality=90)


def jpeg_jobs(root: str, images: int, classes: int, test_per_class: int,
              size: Sequence[int]) -> List[tuple]:
  """(path, class, seed, size) of every JPEG: train/ round-robin over classes, then test/."""
  size = tuple(size)
  jobs = []
  for split, count, offset in (('train', images, 0), ('test', test_per_class * classes, images)):
    for i in range(count):
      cls = i % classes
      path = os.path.join(root, split, f'class{cls:04d}', f'{i:06d}.jpg')
      jobs.append((path, cls, offset + i, size))
  return jobs


def write_jpegs(scratch: str, images: int, classes: int, test_per_class: int,
                jpeg_size: Sequence[int]) -> str:
  """The JPEG folder of these settings under `scratch`, written in parallel unless a complete
  one is there.

  Written into a temporary folder renamed when complete, so an interrupted run leaves no half
  folder that a later run would take for a whole one.
  """
  w, h = jpeg_size
  root = os.path.join(scratch, f'jpegs_{w}x{h}_{images}_{classes}')
  if os.path.isdir(root):
    return root
  os.makedirs(scratch, exist_ok=True)
  partial = tempfile.mkdtemp(prefix='partial_', dir=scratch)
  jobs = [(os.path.join(partial, os.path.relpath(p, root)), *rest)
          for p, *rest in jpeg_jobs(root, images, classes, test_per_class, jpeg_size)]
  for folder in sorted({os.path.dirname(j[0]) for j in jobs}):
    os.makedirs(folder)
  with multiprocessing.get_context('fork').Pool(os.cpu_count()) as pool:
    pool.map(_write_jpeg, jobs, chunksize=64)
  os.rename(partial, root)
  return root
