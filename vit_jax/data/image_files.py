"""Which files are images: one listing for training, evaluation and the tools.

Images are named as one (`IMAGE_EXTENSIONS`, any case); hidden files and folders
('.ipynb_checkpoints', '.DS_Store') are never a class or an image; what a listing leaves out is
said in one line per kind (`Skipped`).
"""

import dataclasses
import os
from typing import List, Optional, Sequence

from absl import logging

from vit_jax.data.image_ops import ImageError

# The files read as images (by name, any case) by every path: training and evaluation folders,
# predict, analyze, features, fewshot. `decode` reads each: TF the formats it decodes, Pillow TIFF.
IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.gif', '.bmp', '.webp', '.tif', '.tiff')


def is_hidden(name: str) -> bool:
  """A hidden file or folder ('.ipynb_checkpoints', '.DS_Store'): never a class or an image."""
  return name.startswith('.')


def class_folders(directory: str) -> List[str]:
  """The visible sub-folders of `directory`, sorted: an image dataset split's classes."""
  return sorted(e.name for e in os.scandir(directory) if e.is_dir() and not is_hidden(e.name))


@dataclasses.dataclass
class Skipped:
  """What listings left out, said in one line each by `log`.

  Attributes:
    files: visible files that are not images by name (`IMAGE_EXTENSIONS`), or not in a class.
    links: symlinked folders not followed: they lead back into the tree being listed.
  """
  files: List[str] = dataclasses.field(default_factory=list)
  links: List[str] = dataclasses.field(default_factory=list)

  def log(self, where: str, tree: str) -> None:
    """One warning line per kind of skip, with the count and an example."""
    if self.files:
      logging.warning('Skipped %d file(s) in %s that are not %s images (in a class folder), '
                      'e.g. %s: convert, rename or move them to use them.', len(self.files),
                      where, '/'.join(IMAGE_EXTENSIONS), sorted(self.files)[0])
    if self.links:
      link = sorted(self.links)[0]
      logging.warning('Did not follow %d symlinked folder(s) in %s that lead back into %s (each '
                      'image is listed once, in its own folder), e.g. %s -> %s.',
                      len(self.links), where, tree, link, os.path.realpath(link))


def image_files(folder: str, tree: Optional[str] = None,
                skipped: Optional[Skipped] = None) -> List[str]:
  """Image files under `folder` as paths relative to it, sorted; hidden files and folders skipped.

  Recursive, as torchvision's ImageFolder reads a class folder: images in nested sub-folders
  belong to it. Symlinks are followed, except to a folder that leads back into `tree` (default
  `folder`: e.g. `cat/up -> ..`, which would list every class again inside cat) or to a folder
  already listed (a loop). Only directories are read (no file is opened). The one listing that
  training, evaluation and the tools (predict, analyze, features) use; what it leaves out is
  added to `skipped`.
  """
  tree = os.path.realpath(tree or folder)
  skipped = Skipped() if skipped is None else skipped
  found, seen = [], set()
  for root, dirs, names in os.walk(folder, followlinks=True):
    seen.add(os.path.realpath(root))
    kept = []
    for d in dirs:
      path = os.path.join(root, d)
      if is_hidden(d):
        continue  # Pruned: os.walk never enters them.
      if os.path.islink(path) and _leads_back(os.path.realpath(path), tree, seen):
        skipped.links.append(path)
      else:
        kept.append(d)
    dirs[:] = kept
    rel = os.path.relpath(root, folder)
    for name in names:
      if is_hidden(name):
        continue
      if name.lower().endswith(IMAGE_EXTENSIONS):
        found.append(name if rel == '.' else os.path.join(rel, name))
      else:
        skipped.files.append(os.path.join(root, name))
  return sorted(found)


def _leads_back(target: str, tree: str, seen: set) -> bool:
  """Whether a link to real path `target` leads into `tree` (or above it) or a listed folder."""
  inside = lambda a, b: a == b or a.startswith(b.rstrip(os.sep) + os.sep)  # noqa: E731
  return inside(target, tree) or inside(tree, target) or target in seen


def list_images(paths: Sequence[str]) -> List[str]:
  """Files named, plus image files in named folders (`image_files`: recursive, sorted).

  What the folders hold besides images is logged in one line (`Skipped.log`).
  """
  if not paths:
    raise ValueError('No images given: pass image files or folders after the flags.')
  found, skipped = [], Skipped()
  for path in paths:
    if os.path.isdir(path):
      inside = [os.path.join(path, name) for name in image_files(path, skipped=skipped)]
      if not inside:
        raise ValueError(f'Folder "{path}" has no image files '
                         f'({", ".join(IMAGE_EXTENSIONS)}; hidden files and folders skipped).')
      found.extend(inside)
    elif os.path.isfile(path):
      found.append(path)
    else:
      raise ImageError(f'Could not find image "{path}"; check the path.')
  skipped.log(', '.join(p for p in paths if os.path.isdir(p)), 'the folder listed')
  return found
