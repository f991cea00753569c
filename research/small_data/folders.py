"""Fashion-MNIST as image folders (and linked class subsets) for the study's runs, written once.

The folder names are the study config's (`configs/study_fashion_mnist.py`, `folder_name`), which
reads them back as `pp` datasets.
"""

import importlib.resources
import json
import os
import re
from typing import Callable, List, Optional, Sequence

import numpy as np

from configs import study_fashion_mnist


FOLDERS_DONE = 'prepared.json'


def class_folder(label: int, name: str) -> str:
  """'0_t-shirt_top': the label first, so sorted folders keep Fashion-MNIST's label order."""
  return f'{label}_' + re.sub(r'[^a-z0-9]+', '_', name.lower()).strip('_')


def prepare_folders(root: str, *, limit: int = 0,
                    subsets: Sequence[Sequence[int]] = (range(0, 5), range(5, 10)),
                    source_dir: Optional[str] = None,
                    log: Callable[[str], None] = print) -> None:
  """Writes Fashion-MNIST as `root/fashion_mnist/{train,test}/<label>_<name>/<index>.png`, once.

  Each class subset gets `root/fashion_mnist_<a>-<b>/{train,test}/` whose class folders link to
  those, so pretraining on classes 0-4 and fine-tuning on 5-9 read the same files. `limit` > 0
  keeps the first `limit` images of each class and split (smoke runs).
  """
  from PIL import Image  # Only here: the runner itself needs no imaging library.
  from vit_jax.data import fashion_mnist
  if os.path.isfile(os.path.join(root, FOLDERS_DONE)):
    return
  source = fashion_mnist.find_source_dir(source_dir)
  names = _label_names()
  folder_name = study_fashion_mnist.folder_name  # The names the study config reads.
  log(f'Writing Fashion-MNIST from {source} as image folders under {root} (once) ...')
  counts = {}
  for split in fashion_mnist.FILENAMES:
    images, labels = fashion_mnist.load_split(source, split)
    for label in range(len(names)):
      folder = os.path.join(root, folder_name(), split, class_folder(label, names[label]))
      os.makedirs(folder, exist_ok=True)
      indices = np.flatnonzero(labels == label)[:limit or None]
      for i in indices:
        Image.fromarray(images[i, :, :, 0]).save(os.path.join(folder, f'{i:05d}.png'))
      counts[f'{split}/{label}'] = len(indices)
    for subset in subsets:
      for label in subset:
        link = os.path.join(root, folder_name(subset), split, class_folder(label, names[label]))
        os.makedirs(os.path.dirname(link), exist_ok=True)
        if not os.path.islink(link):
          os.symlink(os.path.join('..', '..', folder_name(), split, os.path.basename(link)), link)
  with open(os.path.join(root, FOLDERS_DONE), 'w') as f:
    json.dump({'source': source, 'limit': limit, 'counts': counts}, f, indent=1)


def _label_names() -> List[str]:
  text = importlib.resources.files('vit_jax').joinpath('labels/fashion_mnist.txt').read_text()
  return [line.strip() for line in text.splitlines() if line.strip()]
