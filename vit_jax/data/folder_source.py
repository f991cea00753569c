"""Image folders as a dataset source: `<root>/train/<class>/*.jpg|png` plus `test/` or `val/`.

Split strings use TFDS syntax (`train[:98%]`, `train[98%:]`, `train[:1000]`, `test`) on a fixed
file order that interleaves the classes evenly (file j of n in a class sorts at (j + 0.5) / n,
files within a class by name), so every % slice holds each class in proportion and
`train[:98%]` and `train[98%:]` partition train/. `test`, `val` and `validation` name the same
folder when only one of them exists; with train/ alone they are `train[98%:]` and a bare `train`
is `train[:98%]`, as the TFDS presets hold out a slice. Listing only reads directories; a broken
file is found when read (`image_check.readable`). Folder rules (`image_files.image_files`, as
torchvision's ImageFolder): the images are the files named as one (`image_files.IMAGE_EXTENSIONS`,
the list every tool reads), images in nested sub-folders of a class belong to it, hidden files
and folders (`.ipynb_checkpoints`) are skipped, a symlinked folder that leads back into the
dataset is not followed, other files are skipped and counted in one logged line, and an empty
class folder is an error. Splits that share an image are an error, also when it is the same file
under two paths (a class folder linked to another split's, a linked or hard-linked image).
"""

import functools
import hashlib
import os
from typing import Any, Dict, Optional, Tuple

import jax
import numpy as np
import tensorflow as tf
from absl import logging

from vit_jax.data import image_files
from vit_jax.data import sources

# Folder names a split name may be read from, in order of preference.
SPLIT_FOLDERS = {'test': ('test', 'val', 'validation'),
                 'validation': ('validation', 'val', 'test'),
                 'val': ('val', 'validation', 'test')}
# What `test` / `validation` mean for a folder with train/ only.
HELD_OUT_SPLIT = 'train[98%:]'
TRAIN_WITHOUT_HELD_OUT = 'train[:98%]'  # ... and what `train` then means: never trained on both.
# The one class of a folder of unlabeled images: the split folder itself (`<split>/./*.jpg`).
UNLABELED = '.'


def open_folder(root: str) -> sources.Source:
  """The image folder `root` as a source; its classes are the folders of train/.

  A folder of unlabeled images (`root/train/*.jpg` or `root/*.jpg`, no class folders) is one
  class, `UNLABELED`: what self-supervised pretraining (trainer 'mpp', 'mae') reads.

  Raises:
    ValueError: `root` has neither train/<class>/ folders nor images without class folders.
  """
  train_folder = _train_folder(root)
  train_dir = os.path.join(root, train_folder)
  classes = tuple(image_files.class_folders(train_dir)) if train_folder == 'train' else ()
  if not classes and _has_images(train_dir):
    classes = (UNLABELED,)
  if not classes:
    raise ValueError(f'{root} is not an image dataset: expected {root}/train/<class>/*.jpg '
                     f'(or {"/".join(image_files.IMAGE_EXTENSIONS[1:])}) and '
                     f'{root}/test/<class>/*.jpg, one folder per class (or, unlabeled for '
                     f'self-supervised pretraining, {root}/train/*.jpg).')

  def split(name: str, per_process: bool = True) -> sources.Split:
    paths, labels = folder_split(root, classes, without_held_out(root, name))
    index, count = (jax.process_index(), jax.process_count()) if per_process else (0, 1)
    # Strided shares keep every class on every process (the file order interleaves classes).
    share_paths = tf.constant(paths[index::count])
    share_labels = tf.constant(labels[index::count])

    def fetch(ids: tf.Tensor) -> Dict[str, tf.Tensor]:
      return {'image': tf.gather(share_paths, ids), 'label': tf.gather(share_labels, ids)}

    return sources.indexed_split(fetch, tf.io.read_file,
                                 tuple(len(paths[i::count]) for i in range(count)), index,
                                 checked=True, strided=True)

  def overlap(train: str, test: str) -> int:
    """Files of split `test` that split `train` holds too, by the file itself: a class folder
    linked to another split's (`test/cat -> ../train/cat`), an image linked or hard-linked into
    both, are the same file under two paths."""
    paths = [folder_split(root, classes, without_held_out(root, spec))[0] for spec in (train, test)]
    if not set(paths[0]).isdisjoint(paths[1]):  # Slices of one folder: the same paths.
      return len(set(paths[0]) & set(paths[1]))
    trained = {_file_id(path) for path in paths[0]}
    return sum(_file_id(path) in trained for path in paths[1])

  return sources.Source(class_names=classes, split=split, overlap=overlap,
                        identity=functools.partial(identity, root, classes),
                        describe=functools.partial(_describe, root))


def _file_id(path: str) -> Tuple[int, int]:
  """The file `path` names, symlinks followed: (device, inode)."""
  stat = os.stat(path)
  return stat.st_dev, stat.st_ino


def identity(root: str, classes: Tuple[str, ...]) -> Dict[str, Any]:
  """What an image folder holds, wherever it is: its class names and, per split folder, how
  many images and a sha256 of their paths relative to `root` with their sizes in bytes.

  Only directories are listed and files stat'ed (none is read): a renamed class, an added,
  removed, moved or rewritten file (of another size) changes it; moving the whole folder does not.
  """
  files = {}
  for folder in sorted({'train', *(f for names in SPLIT_FOLDERS.values() for f in names)}):
    split_dir = os.path.join(root, folder)
    if not os.path.isdir(split_dir):
      continue
    paths, _ = _list_images(root, folder, classes)
    digest = hashlib.sha256()
    for path in sorted(str(p) for p in paths):
      digest.update(f'{os.path.relpath(path, root)}\0{os.path.getsize(path)}\n'.encode())
    files[folder] = {'images': len(paths), 'sha256': digest.hexdigest()}
  return {'kind': 'folder', 'class_names': list(classes), 'files': files}
def _train_folder(root: str) -> str:
  """'train', or '.' (the folder itself) for a folder of unlabeled images without train/."""
  return 'train' if os.path.isdir(os.path.join(root, 'train')) else UNLABELED


def _has_images(directory: str) -> bool:
  return os.path.isdir(directory) and any(
      e.name.lower().endswith(image_files.IMAGE_EXTENSIONS) and e.is_file()
      and not image_files.is_hidden(e.name) for e in os.scandir(directory))


def _held_out_folder(root: str, name: str) -> Optional[str]:
  """The folder that split `name` (test, val, validation) reads, or None (train/ only)."""
  return next((f for f in SPLIT_FOLDERS.get(name, (name,)) if os.path.isdir(os.path.join(root, f))),
              None)


def without_held_out(root: str, spec: str) -> str:
  """`train` → `train[:98%]` in a folder with train/ only, where the rest is the eval split.

  As in the TFDS presets (`train[:98%]` / `test`), the held-out slice is never trained on; an
  explicit slice (`train[:100%]`) is taken as written.
  """
  if spec.strip() == 'train' and not _held_out_folder(root, 'test'):
    sources.log_once(f'{root} has only train/: split {spec!r} is {TRAIN_WITHOUT_HELD_OUT}, '
                     f'without the held-out {HELD_OUT_SPLIT} that test/val/validation name.')
    return TRAIN_WITHOUT_HELD_OUT
  return spec


def _describe(root: str, spec: str) -> str:
  """What `spec` reads in `root`, for the log: the folders or the slices of train/."""
  if spec.strip() in SPLIT_FOLDERS:
    folder = _held_out_folder(root, spec.strip())
    return (f'{spec!r} = {root}/{folder}/' if folder else
            f'{spec!r} = {HELD_OUT_SPLIT} of {root} (no test/, val/ or validation/ folder)')
  resolved = without_held_out(root, spec)
  return f'{spec!r} of {root}' + (f' (= {resolved})' if resolved != spec else '')


def folder_split(root: str, classes: Tuple[str, ...],
                 spec: str) -> Tuple[np.ndarray, np.ndarray]:
  """(paths, labels) of a TFDS-style split string over the folders of `root`."""
  bases = {name: _base_split(root, classes, name) for name in sources.split_names(spec)}
  try:
    ranges = sources.absolute_ranges(spec, {name: len(paths) for name, (paths, _) in bases.items()})
  except (ValueError, AssertionError) as e:
    raise ValueError(f'Cannot read split {spec!r} of {root}: {str(e).splitlines()[0]}; fix '
                     'config.pp.train / config.pp.test (TFDS syntax, e.g. train[:98%]).') from None
  parts = [tuple(a[start:end] for a in bases[name]) for name, start, end in ranges]
  return np.concatenate([p for p, _ in parts]), np.concatenate([label for _, label in parts])


def _base_split(root: str, classes: Tuple[str, ...], name: str) -> Tuple[np.ndarray, np.ndarray]:
  """A whole split by name: its folder, an alias folder (test/val/validation) or held-out train."""
  folder = _train_folder(root) if name == 'train' else _held_out_folder(root, name)
  if folder:
    if folder != name:
      sources.log_once(f'{root} has no {name}/ folder: split {name!r} reads {folder}/.')
    return _list_images(root, folder, classes)
  if name in SPLIT_FOLDERS:
    sources.log_once(f'{root} has only train/: split {name!r} is {HELD_OUT_SPLIT} (the last 2% '
                     f'of train/ in its fixed order); split \'train\' is then '
                     f'{TRAIN_WITHOUT_HELD_OUT}.')
    return folder_split(root, classes, HELD_OUT_SPLIT)
  raise ValueError(f'Missing {os.path.join(root, name)}: a directory dataset needs '
                   '<root>/train/<class>/*.jpg (and test/, val/ or validation/ for evaluation); '
                   'fix config.pp.train / config.pp.test.')


@functools.cache
def _list_images(root: str, folder: str,
                 classes: Tuple[str, ...]) -> Tuple[np.ndarray, np.ndarray]:
  """Image files under root/folder/<class>/ and their labels, classes interleaved evenly.

  File j of a class with n files sorts at (j + 0.5) / n (ties by class), files within a class
  by relative path: any prefix or suffix holds every class in proportion. Only directories are read
  (no file is opened), so a million files list in seconds; cached per process. What is left out
  (other files, symlinks back into `root`) is logged in one line each.
  """
  split_dir = os.path.join(root, folder)
  unknown = sorted(set(image_files.class_folders(split_dir)) - set(classes))
  if unknown:
    raise ValueError(f'{split_dir} has class folders {unknown} that train/ lacks; every class '
                     'needs a folder in train/.')
  skipped = image_files.Skipped()
  if classes != (UNLABELED,):  # Files beside the class folders belong to no class.
    skipped.files += [e.path for e in os.scandir(split_dir)
                      if not e.is_dir() and not image_files.is_hidden(e.name)]
  files = [image_files.image_files(os.path.join(split_dir, c), root, skipped)
           if os.path.isdir(os.path.join(split_dir, c)) else [] for c in classes]
  skipped.log(split_dir, root)
  empty = [c for c, names in zip(classes, files)
           if not names and os.path.isdir(os.path.join(split_dir, c))]
  if empty:
    named = ', '.join(os.path.join(split_dir, c) for c in empty[:3])
    more = f' and {len(empty) - 3} more' if len(empty) > 3 else ''
    raise ValueError(f'Empty class folder {named}{more}: no '
                     f'{"/".join(image_files.IMAGE_EXTENSIONS)} files in it or its sub-folders '
                     '(hidden ones are skipped); add its images or delete the folder.')
  if not any(files):
    raise ValueError(f'{split_dir} has no {"/".join(image_files.IMAGE_EXTENSIONS)} files in its '
                     f'class folders; expected {split_dir}/<class>/*.jpg.')
  labels = np.concatenate([np.full(len(f), c, np.int64) for c, f in enumerate(files)])
  ranks = np.concatenate([(np.arange(len(f)) + 0.5) / len(f) for f in files if f])
  order = np.lexsort((labels, ranks))
  paths = np.array([os.path.join(split_dir, classes[c], name)
                    for c, names in enumerate(files) for name in names])[order]
  logging.info('%s: %d images in %d classes.', split_dir, len(paths), len(classes))
  return paths, labels[order]

