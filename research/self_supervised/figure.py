r"""MAE's reconstructions as a picture: masked inputs, reconstructions and originals.

  python -m research.self_supervised.figure --workdir=runs/ssl/mae_e4 \
      --out=docs/self_supervised/mae_reconstructions.png

Reads an MAE run directory (`run.json`'s config and the newest saved train state in `train_state/`,
which holds the decoder; the exported params.npz is the encoder alone), hides `mask_ratio` of
the patches of the first `--images` images of the test split with a fixed seed, and draws one
column per image: the masked input (hidden patches grey), the reconstruction (the visible
patches as they were, the decoder's prediction in the hidden ones) and the original. With
`norm_pix_loss` the decoder predicts each patch's pixels normalised by that patch's own mean
and variance; as in MAE's own visualisation, the picture un-normalises them with the hidden
patch's true mean and variance, so the brightness of a hidden patch comes from the original
and its shape from the model.
"""

import json
import os
import sys
from typing import Any, Tuple

import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from absl import app
from absl import flags

from vit_jax import input_pipeline

from vit_jax.training import settings
from vit_jax.weights import resume
from vit_jax.training import mae
from vit_jax.training import masked

ROWS = ('masked input', 'reconstruction', 'original')
HIDDEN_GREY = 0.5  # Hidden patches in the masked input, in [0, 1] pixels.


def load_run(workdir: str) -> Tuple[ml_collections.ConfigDict, Any, int]:
  """(config, params of encoder + decoder, step) of the newest checkpoint of an MAE run."""
  with open(os.path.join(workdir, 'run.json')) as f:
    config = ml_collections.ConfigDict(json.load(f)['config'])
  if config.trainer != 'mae':
    raise ValueError(f'{workdir} was trained with trainer={config.trainer!r}; the picture needs '
                     'an MAE run (trainer=mae), whose saved train states hold the decoder.')
  manager = resume.make_checkpoint_manager(workdir, config.keep_checkpoints)
  step = manager.latest_step()
  if step is None:
    raise ValueError(f'{manager.directory} holds no saved train state; train the run first.')
  state = manager.restore(step, args=ocp.args.StandardRestore())
  return config, jax.device_get(state['params']), step


def unpatchify(patches: np.ndarray, patch: int, grid: Tuple[int, int]) -> np.ndarray:
  """The inverse of `mae.patchify`: (n, gh * gw, p * p * c) → (n, gh * p, gw * p, c)."""
  n, (gh, gw) = patches.shape[0], grid
  x = patches.reshape(n, gh, gw, patch, patch, -1).transpose(0, 1, 3, 2, 4, 5)
  return x.reshape(n, gh * patch, gw * patch, x.shape[-1])


def compose(images: np.ndarray, predictions: np.ndarray, keep: np.ndarray, *, patch: int,
            norm_pix_loss: bool) -> Tuple[np.ndarray, np.ndarray]:
  """(masked input, reconstruction) in the units of `images` (the model's normalised input).

  Visible patches are copied from `images`; hidden ones are grey (`HIDDEN_GREY` of the value
  range of the batch) in the masked input and the prediction in the reconstruction,
  un-normalised with the hidden patch's own mean and variance when `norm_pix_loss`.
  """
  patches = np.asarray(mae.patchify(images, patch))
  if norm_pix_loss:
    mean = patches.mean(axis=-1, keepdims=True)
    predictions = predictions * np.sqrt(patches.var(axis=-1, keepdims=True) + 1e-6) + mean
  hidden = np.asarray(mae.masked_positions(keep, patches.shape[1]))[..., None] > 0
  grey = images.min() + HIDDEN_GREY * (images.max() - images.min())
  grid = (images.shape[1] // patch, images.shape[2] // patch)
  masked_input = unpatchify(np.where(hidden, grey, patches), patch, grid)
  return masked_input, unpatchify(np.where(hidden, predictions, patches), patch, grid)


def reconstruct(config: ml_collections.ConfigDict, params: Any, images: np.ndarray,
                seed: int) -> Tuple[np.ndarray, np.ndarray]:
  """Masks `images` with seed `seed` and runs the MAE: (masked input, reconstruction)."""
  patch = config.model.patches.size[0]
  n, h, w, _ = images.shape
  keep = mae.visible_patches(jax.random.key(seed), n, (h // patch) * (w // patch),
                             config.mae.mask_ratio)
  model = masked.get_model(settings.masked(config), config.model)
  predictions = model.apply({'params': params}, images, train=False, keep=keep)
  return compose(images, np.asarray(predictions), np.asarray(keep), patch=patch,
                 norm_pix_loss=config.mae.norm_pix_loss)


def test_images(config: ml_collections.ConfigDict, count: int, split: str) -> np.ndarray:
  """The first `count` images of `split`, preprocessed as the run's eval (crop, mean/std)."""
  config = ml_collections.ConfigDict(config.to_dict())
  config.batch_eval = count
  batch = next(input_pipeline.get_eval_data(settings.data(config), f'{split}[:{count}]').batches())
  return batch['image'][:count]


def draw(rows: Tuple[np.ndarray, ...], config: ml_collections.ConfigDict, title: str,
         out: str) -> None:
  """One column per image, one row per entry of `rows` (pixels back in [0, 1])."""
  import matplotlib  # Only here: reading a run needs no plotting library.
  matplotlib.use('Agg')
  from matplotlib import pyplot as plt
  mean, std = np.asarray(config.pp.mean), np.asarray(config.pp.std)
  count = rows[0].shape[0]
  fig, axes = plt.subplots(len(rows), count, figsize=(1.2 * count, 1.3 * len(rows)),
                           squeeze=False)
  for r, (label, images) in enumerate(zip(ROWS, rows)):
    for c in range(count):
      axes[r, c].imshow(np.clip(images[c] * std + mean, 0., 1.), interpolation='nearest')
      axes[r, c].set_xticks([])
      axes[r, c].set_yticks([])
    axes[r, 0].set_ylabel(label, fontsize=8)
  fig.suptitle(title, fontsize=8)
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  fig.savefig(out, dpi=100)
  plt.close(fig)


def define_flags() -> None:
  """The command's flags, defined only when run as a script (vit_jax.main has --workdir)."""
  flags.DEFINE_string('workdir', None, 'An MAE run directory (trainer=mae).')
  flags.DEFINE_string('out', None, 'The PNG to write.')
  flags.DEFINE_integer('images', 8, 'Test images shown (the first ones of the split).')
  flags.DEFINE_integer('seed', 0, 'Seed of the random masks.')
  flags.DEFINE_string('split', 'test', 'Split the images come from.')
  flags.mark_flags_as_required(['workdir', 'out'])


def main(argv):
  del argv
  f = flags.FLAGS
  try:
    config, params, step = load_run(f.workdir)
  except (OSError, ValueError) as e:  # One line, no traceback.
    sys.exit(f'figure: error: {str(e).splitlines()[0]}')
  images = test_images(config, f.images, f.split)
  masked_input, reconstruction = reconstruct(config, params, images, f.seed)
  title = (f'MAE, {f.workdir} step {step}: {config.mae.mask_ratio:.0%} of the patches hidden '
           f'(seed {f.seed}), first {f.images} images of {config.dataset} {f.split}')
  draw((masked_input, reconstruction, images), config, title, f.out)
  print(f'Wrote {f.out}')


if __name__ == '__main__':
  define_flags()
  app.run(main)
