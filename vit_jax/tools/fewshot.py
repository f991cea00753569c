"""Few-shot linear accuracy of any checkpoint's frozen representation (the ViT paper's measure).

  python -m vit_jax.fewshot --checkpoint=runs/quickstart/pretrain --dataset=fashion_mnist
  python -m vit_jax.fewshot --checkpoint=ViT-B_16 --dataset=/data/flowers --shots=1,5 --json
  python -m vit_jax.fewshot --checkpoint=runs/quickstart/pretrain --dataset=fashion_mnist \
      --random_init_seed=0

The checkpoint is anything `weights.loading.load_model` reads (a published name or npz, a run
directory, a timm hub folder or .safetensors file, Swin included); its pre-logit features of the
training and test splits of `--dataset` (a TFDS name or an image folder, split strings in TFDS
syntax) are extracted over all local devices, and `training.fewshot` fits k shots per class
by closed-form regularised least squares to ±1 targets, for each seed. Defaults (shots, seeds,
regulariser grid, held-out images) are `config.fewshot`'s (vit_jax/config_lib.py).
`--random_init_seed` measures the same architecture freshly initialised instead: the baseline
that says what pretraining added. Bad input prints one line, exit 1.
"""

import json
import sys
from typing import Any, Dict, List, Sequence

import jax
import jax.numpy as jnp
import ml_collections
from absl import flags

from vit_jax import config_lib
from vit_jax.weights import loading
from vit_jax.tools import cli
from vit_jax.training import fewshot
from vit_jax.training import parallel
from vit_jax.training import settings

_DEFAULTS = config_lib.get_config().fewshot

_DATASET = flags.DEFINE_string('dataset', None, 'TFDS name (e.g. fashion_mnist) or an image '
                               'folder (DIR/train/<class>/*, DIR/test/<class>/*).')
_SHOTS = flags.DEFINE_list('shots', [str(k) for k in _DEFAULTS.shots],
                           'Images per class the linear map is fitted on.')
_SEEDS = flags.DEFINE_integer('seeds', _DEFAULTS.seeds, 'Draws of the shots (seeds 0..n-1).')
_TRAIN_SPLIT = flags.DEFINE_string('train_split', _DEFAULTS.train_split,
                                   'Split the shots and held-out images are drawn from.')
_TEST_SPLIT = flags.DEFINE_string('test_split', _DEFAULTS.test_split,
                                  'Split the accuracy is measured on (all of it).')
_L2_REGS = flags.DEFINE_list('l2_regs', [f'{v:g}' for v in _DEFAULTS.l2_regs],
                             'Regularisers tried, the best on the held-out images used; one '
                             'value = a fixed regulariser.')
_HOLDOUT = flags.DEFINE_integer('holdout', _DEFAULTS.holdout,
                                'Held-out training images per class that choose the regulariser.')
_TFDS_DATA_DIR = flags.DEFINE_string('tfds_data_dir', None, 'TFDS data dir (default: TFDS\'s).')
_RANDOM_INIT_SEED = flags.DEFINE_integer(
    'random_init_seed', None, 'Measure the checkpoint\'s architecture freshly initialised with '
    'this seed instead of its weights (the baseline).')
for _name in ('checkpoint', 'model', 'image_size', 'batch_size', 'json'):  # Defined in cli.py.
  flags.declare_key_flag(_name)
FLAG_DEFAULTS = {'batch_size': 256}
# What this tool's refusals tell the user to change: its own flags, not config.fewshot's.
FLAG_NAMES = fewshot.FlagNames(datasets='--dataset', shots='--shots', l2_regs='--l2_regs',
                               holdout='--holdout', train_split='--train_split',
                               test_split='--test_split')
FLAG_HELP = {'image_size': 'Square input side; default: the resolution the checkpoint was '
                           'trained at (224 if it has no position embeddings).',
             'batch_size': 'Images per forward pass over all local devices.'}


def _numbers(values: Sequence[str], flag: str, kind: type) -> List[Any]:
  try:
    numbers = [kind(v) for v in values]
  except ValueError:
    numbers = []
  if not numbers or min(numbers) <= 0:
    raise ValueError(f'--{flag}={",".join(values)} must be a list of positive '
                     f'{kind.__name__}s, e.g. --{flag}={"1,5,10,25" if kind is int else "1,1024"}.')
  return numbers


def make_config(loaded: loading.LoadedModel) -> ml_collections.ConfigDict:
  """The eval input (the checkpoint's resolution, mean, std) and `fewshot` fields from flags."""
  config = config_lib.get_config()
  config.pp.update(dict(crop=loaded.image_size, mean=tuple(loaded.mean), std=tuple(loaded.std)))
  config.batch_eval = cli.BATCH_SIZE.value
  config.tfds_data_dir = _TFDS_DATA_DIR.value
  if _SEEDS.value < 1 or _HOLDOUT.value < 0:
    raise ValueError('--seeds must be at least 1 and --holdout at least 0.')
  config.fewshot.update(dict(
      datasets=(_DATASET.value,), shots=tuple(_numbers(_SHOTS.value, 'shots', int)),
      seeds=_SEEDS.value, train_split=_TRAIN_SPLIT.value, test_split=_TEST_SPLIT.value,
      l2_regs=tuple(_numbers(_L2_REGS.value, 'l2_regs', float)), holdout=_HOLDOUT.value))
  return config


def measure(loaded: loading.LoadedModel, config: ml_collections.ConfigDict,
            random_init_seed: Any = None) -> fewshot.DatasetResult:
  """Few-shot results of `loaded` (or of its architecture re-initialised) on the flags' data."""
  mesh = parallel.make_mesh()
  parallel.check_batch_size(config.batch_eval, mesh, name='--batch_size')
  fs, data = settings.fewshot(config), settings.data(config)
  fewshot.check_dataset(fs, data, fs.datasets[0], FLAG_NAMES)
  params = loaded.params
  if random_init_seed is not None:
    size = loaded.image_size
    params = loaded.model.init(jax.random.key(random_init_seed),
                               jnp.zeros((1, size, size, 3)), train=False)['params']
  params = parallel.put_replicated(params, mesh)
  represent = fewshot.make_representation_fn(loaded.model, mesh)
  return fewshot.run_dataset(fs, data, fs.datasets[0], represent, params, mesh)


def report(checkpoint: str, config: ml_collections.ConfigDict, measured: fewshot.DatasetResult,
           random_init_seed: Any) -> Dict[str, Any]:
  """The JSON document: what was measured, on what, and each number of shots' accuracies."""
  fs = config.fewshot
  return {
      'checkpoint': checkpoint, 'random_init_seed': random_init_seed, 'dataset': fs.datasets[0],
      'train_split': fs.train_split, 'test_split': fs.test_split, 'image_size': config.pp.crop,
      'feature_dim': measured.feature_dim, 'num_train': measured.num_train,
      'num_test': measured.num_test, 'seeds': fs.seeds, 'l2_grid': list(fs.l2_regs),
      'holdout_per_class': fs.holdout, 'seconds': round(measured.seconds, 2),
      'results': [{'shots': r.shots, 'mean': r.mean, 'std': r.std,
                   'accuracies': list(r.accuracies), 'l2_regs': list(r.l2_regs),
                   'held_out_per_class': list(r.held_out_per_class)}
                  for r in measured.results]}


def format_table(doc: Dict[str, Any]) -> str:
  """The report as a few lines of text: one row per number of shots."""
  what = doc['checkpoint'] + (f' (random init, seed {doc["random_init_seed"]})'
                              if doc['random_init_seed'] is not None else '')
  grid = doc['l2_grid']
  l2 = (f'l2 fixed at {grid[0]:g}' if len(grid) == 1 else
        f'l2 chosen per seed from {len(grid)} values on held-out training images (not shots; '
        f'at most {doc["holdout_per_class"]} a class, each row says how many)')
  lines = [f'Few-shot linear accuracy of {what} on {doc["dataset"]}',
           f'  shots from {doc["train_split"]} ({doc["num_train"]} images), tested on all '
           f'{doc["num_test"]} of {doc["test_split"]}; {doc["feature_dim"]}-d features at '
           f'{doc["image_size"]}px; {doc["seeds"]} seeds; {l2}; {doc["seconds"]:.1f}s',
           f'  {"shots":>5}  {"accuracy (mean ± std)":>22}  l2 per seed']
  for r in doc['results']:
    fewest, most = r['held_out_per_class']
    held = '' if len(grid) == 1 else (
        f' (on {most} held-out a class)' if fewest == most else
        f' (on {fewest}-{most} held-out a class)')
    lines.append(f'  {r["shots"]:>5}  {100 * r["mean"]:>13.2f} ± {100 * r["std"]:5.2f} %  '
                 + ', '.join(f'{v:g}' for v in r['l2_regs']) + held)
  return '\n'.join(lines)


def main(argv: Sequence[str]) -> str:
  """Loads the checkpoint, measures it on the dataset and returns the table or the JSON."""
  if len(argv) > 1:
    raise ValueError(f'Unexpected arguments {" ".join(argv[1:])}: the tool reads only flags.')
  if not cli.CHECKPOINT.value or not _DATASET.value:
    raise ValueError('Pass --checkpoint=PATH_OR_NAME (an .npz, a run directory, a timm hub '
                     'folder or e.g. ViT-B_16) and --dataset=NAME_OR_FOLDER.')
  loaded = loading.load_model(cli.CHECKPOINT.value, cli.MODEL.value, cli.IMAGE_SIZE.value)
  config = make_config(loaded)
  measured = measure(loaded, config, _RANDOM_INIT_SEED.value)
  doc = report(cli.CHECKPOINT.value, config, measured, _RANDOM_INIT_SEED.value)
  return json.dumps(doc, indent=1) if cli.JSON.value else format_table(doc)


if __name__ == '__main__':
  cli.run(sys.modules[__name__])
