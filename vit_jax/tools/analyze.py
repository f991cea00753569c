"""What a ViT checkpoint learned, as in the ViT paper's Figures 6 and 7.

  python -m vit_jax.analyze --checkpoint=ViT-B_16 --out=/tmp/vit cat.jpg
  python -m vit_jax.analyze --checkpoint=runs/quickstart/finetune --out=/tmp/vit  # samples

Writes to --out:
  rollout_<i>.png            attention rollout (Abnar & Zuidema 2020) over each image (Fig. 6)
  embedding_filters.png      first principal components of the RGB patch-embedding filters
                             (the ResNet root filters for hybrids) (Fig. 7 left)
  posemb_similarity.png      cosine similarity of each position embedding with all others,
                             one small map per grid position (Fig. 7 centre)
  attention_distance.png     mean attention distance per head and layer (Fig. 7 right)
  analysis.json              the numbers behind every figure

Without image arguments it uses built-in samples: scikit-image's data images if installed,
else the photos shipped with matplotlib, else random noise (then the rollout and distances
say little; the output says which was used).
"""

import json
import os
import sys
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
from absl import flags

from vit_jax.data import image_ops
from vit_jax.data import image_files
from vit_jax.tools import cli
from vit_jax.tools import features
from vit_jax import models
from vit_jax import presets
from vit_jax.weights import loading


_NUM_COMPONENTS = flags.DEFINE_integer(
    'num_components', 28, 'Principal components of the embedding filters to draw (the paper '
    'shows 28).')
for _name in ('checkpoint', 'model', 'image_size', 'batch_size', 'out'):  # Defined in cli.py.
  flags.declare_key_flag(_name)
FLAG_DEFAULTS = {'batch_size': 8}
FLAG_HELP = {'image_size': "Square input side; default: the checkpoint's.",
             'out': 'Folder for the PNGs and analysis.json.'}


def attention_rollout(attention: Sequence[np.ndarray]) -> np.ndarray:
  """Attention rollout: how much each input token flows into each output token.

  Per layer: average the heads, add the identity (the residual path), renormalise rows; then
  multiply the layers, last on the left (Abnar & Zuidema 2020).

  Args:
    attention: per layer, (B, heads, N, N) softmax weights, rows = queries.

  Returns:
    (B, N, N) rolled-out attention; row q says where output token q draws from.
  """
  rollout = None
  for weights in attention:
    a = np.asarray(weights, np.float64).mean(axis=1)
    a = a + np.eye(a.shape[-1])
    a = a / a.sum(axis=-1, keepdims=True)
    rollout = a if rollout is None else a @ rollout
  return rollout


def rollout_maps(rollout: np.ndarray, grid: Tuple[int, int], num_prefix: int) -> np.ndarray:
  """(B, gh, gw) maps scaled to max 1: the class token's row, or all rows' mean without one."""
  rows = rollout[:, 0] if num_prefix else rollout.mean(axis=1)
  maps = rows[:, num_prefix:].reshape(-1, *grid)
  return maps / maps.max(axis=(1, 2), keepdims=True)


def patch_distances(grid: Tuple[int, int], stride: int) -> np.ndarray:
  """(P, P) pixel distances between the centres of the grid's patches (row-major)."""
  ys, xs = np.mgrid[:grid[0], :grid[1]]
  centres = np.stack([ys.ravel(), xs.ravel()], axis=-1) * float(stride)
  return np.linalg.norm(centres[:, None] - centres[None], axis=-1)


def mean_attention_distance(attention: Sequence[np.ndarray], grid: Tuple[int, int],
                            stride: int, num_prefix: int) -> np.ndarray:
  """(layers, heads) mean pixel distance between query and key patches, weighted by attention.

  The ViT paper's "attention distance" (like a CNN's receptive field size). Prefix tokens have
  no position, so only patch-to-patch weights count, renormalised per query; the mean runs
  over queries and images.
  """
  dist = patch_distances(grid, stride)
  out = []
  for weights in attention:
    a = np.asarray(weights, np.float64)[:, :, num_prefix:, num_prefix:]
    a = a / a.sum(axis=-1, keepdims=True)
    out.append((a * dist).sum(axis=-1).mean(axis=(0, 2)))
  return np.stack(out)


def embedding_filters(params: Dict[str, Any]) -> Tuple[str, np.ndarray]:
  """The RGB filters that see pixels: the patch embedding, or a hybrid's ResNet root conv."""
  if 'conv_root' in params:
    return 'conv_root', np.asarray(params['conv_root']['kernel'])
  return 'embedding', np.asarray(params['embedding']['kernel'])


def principal_components(kernel: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
  """First `k` principal components of the filters of an HWIO kernel, as (k, H, W, I) images.

  Each output channel is one sample (a flattened H×W×I filter); returns the components and
  their explained-variance ratios.
  """
  h, w, c, d = kernel.shape
  samples = kernel.reshape(h * w * c, d).T.astype(np.float64)
  samples = samples - samples.mean(axis=0)
  _, s, vt = np.linalg.svd(samples, full_matrices=False)
  k = min(k, len(s))
  ratio = s**2 / max(np.sum(s**2), 1e-30)
  return vt[:k].reshape(k, h, w, c), ratio[:k]


def posemb_similarity(posemb: np.ndarray, grid: Tuple[int, int],
                      num_prefix: int) -> np.ndarray:
  """(gh, gw, gh, gw) cosine similarity of each grid position's embedding with every other."""
  table = np.asarray(posemb, np.float64)[0, num_prefix:]
  table = table / np.maximum(np.linalg.norm(table, axis=-1, keepdims=True), 1e-12)
  return (table @ table.T).reshape(*grid, *grid)


def sample_images(size: int) -> Tuple[List[Tuple[str, np.ndarray]], str]:
  """Built-in (name, uint8 RGB) images and a note on where they came from."""
  try:
    from skimage import data  # Optional; not a dependency.
    names = ('astronaut', 'coffee', 'chelsea', 'rocket')
    return [(n, getattr(data, n)()) for n in names], 'scikit-image sample images'
  except ImportError:
    pass
  try:
    import matplotlib.cbook
    names = ('grace_hopper.jpg', 'Minduka_Present_Blue_Pack.png')
    samples = [(n, image_ops.read_image(str(matplotlib.cbook.get_sample_data(n,
                                                                             asfileobj=False))))
               for n in names]
    return samples, 'matplotlib sample photos (scikit-image is not installed)'
  except (OSError, ValueError):
    pass
  rng = np.random.default_rng(0)
  images = [(f'noise_{i}', rng.integers(0, 256, (size, size, 3), dtype=np.uint8))
            for i in range(4)]
  return images, 'random noise images (no sample images found): rollout and distances are ' \
                 'not meaningful'


def _image(array: np.ndarray) -> np.ndarray:
  """[-1, 1] model input → float RGB in [0, 1] for display."""
  return np.clip(array * 0.5 + 0.5, 0., 1.)


def _upsample(grid_map: np.ndarray, size: int) -> np.ndarray:
  from PIL import Image
  image = Image.fromarray(grid_map.astype(np.float32), mode='F')
  return np.asarray(image.resize((size, size), Image.BILINEAR))


def _figure(width: float, height: float):
  """A pyplot-free Figure: no global state or GUI backend, safe in tests and threads."""
  from matplotlib.figure import Figure
  return Figure(figsize=(width, height))


def plot_rollout(image: np.ndarray, grid_map: np.ndarray, title: str, path: str) -> None:
  """Image beside image × rollout mask (as in the paper's Figure 6)."""
  mask = _upsample(grid_map, image.shape[0])[..., None]
  fig = _figure(9, 3.2)
  axes = fig.subplots(1, 3)
  for ax, shown, label in zip(axes, (_image(image), mask[..., 0], _image(image) * mask),
                              ('input', 'rollout', 'input × rollout')):
    ax.imshow(shown, cmap='inferno' if shown.ndim == 2 else None, vmin=0, vmax=1)
    ax.set_title(label, fontsize=9)
    ax.axis('off')
  fig.suptitle(title, fontsize=9)
  fig.savefig(path, dpi=100, bbox_inches='tight')


def _mosaic(tiles: np.ndarray, cols: int, pad: float) -> np.ndarray:
  """(n, h, w[, c]) tiles → one image with `pad`-valued one-pixel gaps, `cols` tiles a row."""
  n, h, w = tiles.shape[:3]
  rows = -(-n // cols)
  out = np.full((rows * (h + 1) - 1, cols * (w + 1) - 1, *tiles.shape[3:]), pad, tiles.dtype)
  for i, tile in enumerate(tiles):
    r, c = divmod(i, cols)
    out[r * (h + 1):r * (h + 1) + h, c * (w + 1):c * (w + 1) + w] = tile
  return out


def plot_components(components: np.ndarray, source: str, path: str) -> None:
  lo = components.min(axis=(1, 2, 3), keepdims=True)
  hi = components.max(axis=(1, 2, 3), keepdims=True)
  tiles = (components - lo) / np.maximum(hi - lo, 1e-12)  # Each component stretched to [0, 1].
  cols = min(7, len(tiles))
  fig = _figure(cols * 0.9, -(-len(tiles) // cols) * 0.9 + 0.4)
  ax = fig.subplots()
  ax.imshow(_mosaic(tiles, cols, 1.), interpolation='nearest')
  ax.axis('off')
  ax.set_title(f'{source} filters: first {len(tiles)} principal components', fontsize=9)
  fig.savefig(path, dpi=120, bbox_inches='tight')


def plot_posemb_similarity(similarity: np.ndarray, path: str) -> None:
  gh, gw = similarity.shape[:2]
  tiles = similarity.reshape(gh * gw, gh, gw)
  fig = _figure(7, 7 * gh / gw)
  ax = fig.subplots()
  shown = ax.imshow(_mosaic(tiles, gw, np.nan), cmap='viridis', vmin=-1, vmax=1,
                    interpolation='nearest')
  fig.colorbar(shown, ax=ax, fraction=0.046, pad=0.04, label='cosine similarity')
  ax.set_title('Position embedding similarity (tile = input patch row, column)', fontsize=9)
  ax.axis('off')
  fig.savefig(path, dpi=120, bbox_inches='tight')


def plot_attention_distance(distance: np.ndarray, image_size: int, path: str) -> None:
  layers, heads = distance.shape
  fig = _figure(5, 4)
  ax = fig.subplots()
  for h in range(heads):
    ax.scatter(np.arange(1, layers + 1), distance[:, h], s=12, label=f'head {h + 1}')
  ax.set_xlabel('network depth (layer)')
  ax.set_ylabel('mean attention distance (pixels)')
  ax.set_ylim(0, image_size)
  ax.set_xticks(np.arange(1, layers + 1))
  if heads <= 16:
    ax.legend(fontsize=6, ncol=2)
  fig.savefig(path, dpi=120, bbox_inches='tight')


def _load_inputs(paths: Sequence[str], loaded: loading.LoadedModel
                 ) -> Tuple[List[str], np.ndarray, str]:
  size = loaded.image_size
  if paths:
    files = image_files.list_images(paths)
    return (files, image_ops.load_images(files, loaded.image_size, loaded.mean, loaded.std),
            'images given on the command line')
  samples, note = sample_images(size)
  return ([name for name, _ in samples],
          np.stack([image_ops.preprocess(image, size, loaded.mean, loaded.std)
                    for _, image in samples]), note)


def _attention(loaded: loading.LoadedModel, feature_fn: Any, images: np.ndarray,
               batch_size: int) -> List[np.ndarray]:
  """Per layer, (num_images, heads, N, N) attention weights, computed batch by batch."""
  batches = [feature_fn(loaded.params, images[i:i + batch_size]).attention
             for i in range(0, len(images), batch_size)]
  return [np.concatenate([np.asarray(b[layer]) for b in batches])
          for layer in range(len(batches[0]))]


def analyze(loaded: loading.LoadedModel, out_dir: str, image_paths: Sequence[str] = (), *,
            num_components: int = 28, batch_size: int = 8) -> Dict[str, Any]:
  """Writes the figures and analysis.json into `out_dir` and returns the JSON's contents.

  Raises:
    ValueError: the model has no global attention to draw (Swin, Mixer, ResNet), before any
      file is written.
  """
  feature_fn = features.make_feature_fn(loaded.model)
  os.makedirs(out_dir, exist_ok=True)
  config, size = loaded.config, loaded.image_size
  grid = tuple(models.token_grid(config, (size, size)))
  stride, prefix = size // grid[0], presets.num_prefix_tokens(config)
  names, images, note = _load_inputs(image_paths, loaded)
  attention = _attention(loaded, feature_fn, images, batch_size)
  result: Dict[str, Any] = {
      'checkpoint': loaded.source, 'model': config.model_name, 'image_size': size,
      'token_grid': list(grid), 'images': names, 'images_note': note, 'files': []}

  def record(name: str) -> str:
    result['files'].append(name)
    return os.path.join(out_dir, name)

  maps = rollout_maps(attention_rollout(attention), grid, prefix)
  result['attention_rollout'] = {}
  for i, (name, image, grid_map) in enumerate(zip(names, images, maps)):
    plot_rollout(image, grid_map, name, record(f'rollout_{i}.png'))
    result['attention_rollout'][name] = np.round(grid_map, 5).tolist()

  distance = mean_attention_distance(attention, grid, stride, prefix)
  plot_attention_distance(distance, size, record('attention_distance.png'))
  result['mean_attention_distance_px'] = np.round(distance, 3).tolist()

  source, kernel = embedding_filters(loaded.params)
  if kernel.shape[2] == 3:
    components, ratio = principal_components(kernel, num_components)
    plot_components(components, source, record('embedding_filters.png'))
    result['embedding_filters'] = {'source': source, 'kernel_shape': list(kernel.shape),
                                   'explained_variance_ratio': np.round(ratio, 5).tolist()}

  posemb = loaded.params.get('Transformer', {}).get('posembed_input', {}).get('pos_embedding')
  if posemb is not None:
    # The table's rows: no rows for prefix tokens with no_embed_class (DeiT-III, DINOv2 reg).
    similarity = posemb_similarity(posemb, grid, presets.posemb_prefix_tokens(config))
    plot_posemb_similarity(similarity, record('posemb_similarity.png'))
    result['posemb_similarity'] = np.round(similarity, 4).tolist()

  with open(record('analysis.json'), 'w') as f:
    json.dump(result, f)
  return result


def summary(result: Dict[str, Any], out_dir: str) -> str:
  """A few lines for the terminal: inputs, files, and attention distance per layer."""
  lines = [f'Images: {len(result["images"])} ({result["images_note"]}).',
           f'Wrote {", ".join(result["files"])} to {out_dir}.',
           'Mean attention distance (px) per layer, min/mean/max over heads:']
  for layer, heads in enumerate(result['mean_attention_distance_px']):
    lines.append(f'  layer {layer + 1:2d}: {min(heads):6.1f} {np.mean(heads):6.1f} '
                 f'{max(heads):6.1f}')
  return '\n'.join(lines)


def main(argv: Sequence[str]) -> str:
  """Analyses the checkpoint named by the flags on the images in argv[1:] (none: samples)."""
  checkpoint_name, out = cli.CHECKPOINT.value, cli.OUT.value
  if not checkpoint_name or not out:
    raise ValueError('Pass --checkpoint=PATH_OR_NAME and --out=DIR.')
  loaded = loading.load_model(checkpoint_name, cli.MODEL.value, cli.IMAGE_SIZE.value)
  result = analyze(loaded, out, argv[1:], num_components=_NUM_COMPONENTS.value,
                   batch_size=max(cli.BATCH_SIZE.value, 1))
  return summary(result, out)


if __name__ == '__main__':
  cli.run(sys.modules[__name__])
