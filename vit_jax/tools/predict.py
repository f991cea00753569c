"""Top-k predictions of a checkpoint on image files.

  python -m vit_jax.predict --checkpoint=ViT-B_16 cat.jpg photos/
  python -m vit_jax.predict --checkpoint=runs/quickstart/finetune img.png
  python -m vit_jax.predict --checkpoint=model.npz --labels=cifar10 --json img/

The model is read from the checkpoint itself (`weights.architecture`; a run directory's
metadata.json adds what shapes cannot say). `--model` (a preset name or a .py file whose
`get_config()` returns a model ConfigDict) is only a check that the file is that model.

Images (JPEG/PNG/..., any size or colour mode) are preprocessed as the eval pipeline does
(`image_ops.preprocess`) and run in batches. Label names: `--labels` (a shipped set or a text
file with one name a line) if given, else the run's metadata, else the shipped set the head
size identifies (1000, 21843, 100 classes), else 'class N'. Bad input prints one line, exit 1; a
file that cannot be read is one line (an `error` entry with --json), the others are predicted.
"""

import importlib.resources
import json
import os
import sys
from typing import Dict, Iterator, List, Optional, Sequence, Union

import jax
import numpy as np
from absl import flags
from absl import logging

from vit_jax.data import image_ops
from vit_jax.data import image_files
from vit_jax.tools import cli
from vit_jax.weights import loading

LABEL_SETS = ('imagenet1k', 'imagenet21k', 'cifar10', 'cifar100', 'fashion_mnist')
# Only unambiguous sizes pick a label set by default (cifar10 and fashion_mnist both have 10).
_DEFAULT_LABELS = {1000: 'imagenet1k', 21843: 'imagenet21k', 100: 'cifar100'}


_TOP_K = flags.DEFINE_integer('top_k', 5, 'Labels to print per image.')
_LABELS = flags.DEFINE_string(
    'labels', None, f'One of {", ".join(LABEL_SETS)} or a text file with one label a line; '
    'default: the shipped set with as many classes as the head.')
for _name in ('checkpoint', 'model', 'image_size', 'batch_size', 'json'):  # Defined in cli.py.
  flags.declare_key_flag(_name)
FLAG_DEFAULTS = {'batch_size': 16}
FLAG_HELP = {'image_size': 'Square input side; default: the resolution the checkpoint was '
                           'trained at (224 if it has no position embeddings).'}


def load_labels(labels: Optional[str], num_classes: int,
                class_names: Optional[Sequence[str]] = None) -> List[str]:
  """Label names for a head of `num_classes` outputs ('class N' when no set is known).

  An explicit `labels` wins; then `class_names` (a run's metadata); then the shipped set
  whose size identifies it.
  """
  if not labels and class_names and len(class_names) == num_classes:
    return list(class_names)
  name = labels or _DEFAULT_LABELS.get(num_classes)
  if name is None:
    return [f'class {i}' for i in range(num_classes)]
  if name in LABEL_SETS:
    text = importlib.resources.files('vit_jax').joinpath(f'labels/{name}.txt').read_text()
  elif os.path.isfile(name):
    with open(name, encoding='utf-8') as f:
      text = f.read()
  else:
    raise ValueError(f'Unknown --labels={name!r}: use one of {", ".join(LABEL_SETS)} or a text '
                     'file with one label a line.')
  names = [line.strip() for line in text.splitlines() if line.strip()]
  if len(names) != num_classes:
    raise ValueError(f'--labels={name} has {len(names)} names but the checkpoint head has '
                     f'{num_classes} classes; pass the label set it was trained on.')
  return names


def top_k(logits: np.ndarray, k: int) -> tuple:
  """(indices, softmax probabilities) of the k largest logits per row, best first."""
  logits = np.asarray(logits, np.float64)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  k = min(k, logits.shape[-1])
  order = np.argsort(-probs, axis=-1, kind='stable')[:, :k]
  return order, np.take_along_axis(probs, order, axis=-1)


def predict(loaded: loading.LoadedModel, paths: Sequence[str], *, k: int = 5,
            labels: Optional[Sequence[str]] = None, batch_size: int = 16) -> Iterator[Dict]:
  """Yields {'image', 'predictions': [{'index', 'label', 'probability'}]} per image path.

  A file that cannot be read yields {'image', 'error': one line saying why} in its place, and
  the others are predicted. Batches are padded to `batch_size` so the forward pass compiles once.
  """
  if not loaded.num_classes:
    raise ValueError(f'{loaded.source} has no classification head; predictions need a '
                     'fine-tuned or classifier checkpoint.')
  labels = labels or load_labels(None, loaded.num_classes, loaded.class_names)
  forward = jax.jit(lambda params, x: loaded.model.apply({'params': params}, x, train=False))
  for start in range(0, len(paths), batch_size):
    inputs = [_read(path, loaded) for path in paths[start:start + batch_size]]
    images = [x for x in inputs if isinstance(x, np.ndarray)]
    rows = iter([])
    if images:
      padded = np.stack(images + [np.zeros_like(images[0])] * (batch_size - len(images)))
      rows = zip(*top_k(np.asarray(forward(loaded.params, padded))[:len(images)], k))
    for path, x in zip(paths[start:start + batch_size], inputs):
      if not isinstance(x, np.ndarray):
        yield {'image': path, 'error': x}
        continue
      idx, prob = next(rows)
      yield {'image': path, 'predictions': [
          {'index': int(i), 'label': labels[i], 'probability': float(p)}
          for i, p in zip(idx, prob)]}


def _read(path: str, loaded: loading.LoadedModel) -> Union[np.ndarray, str]:
  """The model input of one file, or why it cannot be read (one line)."""
  try:
    return image_ops.preprocess(image_ops.read_image(path), loaded.image_size, loaded.mean,
                                loaded.std)
  except image_ops.ImageError as e:
    return str(e)


def format_text(result: Dict) -> str:
  lines = [result['image']]
  lines += [f'  {p["probability"]:7.2%}  {p["label"]}' for p in result['predictions']]
  return '\n'.join(lines)


def main(argv: Sequence[str]) -> Optional[int]:
  """Loads the checkpoint named by the flags and prints predictions for the paths in argv[1:].

  Returns 1 (the exit status) when a file could not be read: the others are still predicted.
  """
  checkpoint, batch_size, labels_flag = cli.CHECKPOINT.value, cli.BATCH_SIZE.value, _LABELS.value
  if not checkpoint:
    raise ValueError('Pass --checkpoint=PATH_OR_NAME (an .npz file, a run directory or e.g. '
                     'ViT-B_16).')
  if _TOP_K.value < 1 or batch_size < 1:
    raise ValueError('--top_k and --batch_size must be at least 1.')
  paths = image_files.list_images(argv[1:])
  loaded = loading.load_model(checkpoint, cli.MODEL.value, cli.IMAGE_SIZE.value)
  if loaded.head_is_zero:
    logging.warning('%s has an all-zero head (a pre-training file): every class gets the same '
                    'probability, so these predictions are meaningless; use a fine-tuned '
                    'checkpoint (e.g. imagenet21k+imagenet2012/...).', checkpoint)
  labels = load_labels(labels_flag, loaded.num_classes, loaded.class_names)
  results = []
  for result in predict(loaded, paths, k=_TOP_K.value, labels=labels,
                        batch_size=min(batch_size, len(paths))):
    results.append(result)
    if 'error' in result:  # Said as it comes, in the order of the files; exit status 1 at the end.
      cli.print_error(sys.modules[__name__], result['error'])
    elif not cli.JSON.value:
      print(format_text(result), flush=True)
  if cli.JSON.value:
    json.dump({'checkpoint': checkpoint, 'image_size': loaded.image_size,
               'head_is_zero': loaded.head_is_zero, 'results': results}, sys.stdout, indent=1)
    print()
  predicted = any('predictions' in result for result in results)
  if predicted and labels_flag is None and loaded.num_classes == 10 and not loaded.class_names:
    logging.warning('Labels shown as class indices: pass --labels=cifar10 or '
                    '--labels=fashion_mnist for names.')
  return 1 if any('error' in result for result in results) else None


if __name__ == '__main__':
  cli.run(sys.modules[__name__])
