"""Analytic forward FLOPs of a ViT, hybrid or Swin preset or checkpoint, per image.

  python -m vit_jax.flops --model=ViT-B_16 --image=224
  python -m vit_jax.flops --checkpoint=runs/quickstart/finetune   # its model, size and classes
  python -m vit_jax.flops --model=R50+ViT-B_16 --image=384 --xla   # also ask XLA
  python -m vit_jax.flops --model=ViT-B_16 --also=Swin-B_4_7 --sizes=224,384,512,768,1024

FLOPs are 2 × the multiply-accumulates of every matmul and convolution (attention scores and
the attention-weighted sum included); norms, softmax, GELU and adds are left out, which is why
XLA's own count of the compiled forward is ~1% higher. ViT-B/16 at 224 (197 tokens) is
35.13 GFLOP, ViT-Ti/16 2.507 GFLOP.

The table printed after the breakdown shows how the attention core (∝ depth × tokens² × width)
and the total move when one dimension doubles: the image side or patch size changes the token
count quadratically, so attention grows ~16× per doubled side, while width and depth are linear.
A Swin attends within M×M windows: its attention is tokens × M² × width, linear in the tokens
(windows are padded to whole windows, which the count includes). With posemb='relative' each
block's queries also meet every offset's key ('relative_position': tokens × offsets × width,
offsets = (2gh-1)(2gw-1) + 3 with a class token); the gather of each pair's logit is free.
`--sizes` prints attention and
total FLOPs against the image side for `--model` and the `--also` models (docs/analysis.md).
`--checkpoint` (anything the other tools read) counts the model the checkpoint holds, at its
resolution and with its head unless `--image` / `--num_classes` say otherwise. Mixer and plain
ResNet models are refused in one line (XLA's count: the `--xla` number of another tool, not
analytic).
"""

import math
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from absl import flags

import ml_collections

from vit_jax.tools import cli
from vit_jax import families
from vit_jax.families.flops import FlopsCounter
from vit_jax import models
from vit_jax import presets
from vit_jax.weights import loading

PARTS = ('resnet', 'patch_embedding', 'patch_merging', 'qkv_out_projections', 'attention',
         'relative_position', 'mlp', 'head')


_IMAGE = flags.DEFINE_integer('image', 224, 'Square image side in pixels.')
_NUM_CLASSES = flags.DEFINE_integer('num_classes', 1000, 'Outputs of the head (0: no head).')
_SIZES = flags.DEFINE_list('sizes', [], 'Image sides: print attention and total FLOPs per side '
                           'for --model and the --also models instead of the breakdown.')
_ALSO = flags.DEFINE_list('also', [], 'More presets for the --sizes table (e.g. Swin-B_4_7).')
_XLA = flags.DEFINE_bool('xla', False, 'Also compile the forward pass (batch 1) and print '
                         'XLA\'s cost-analysis FLOPs (takes seconds to a minute).')
for _name in ('checkpoint', 'model', 'image_size'):  # Defined in cli.py; --image_size: --image.
  flags.declare_key_flag(_name)
FLAG_DEFAULTS = {'model': 'ViT-B_16'}
FLAG_HELP = {'model': 'Model preset (ViT, hybrid or Swin); with --checkpoint, a check that the '
                      'file is that model.',
             'checkpoint': 'Count the model this checkpoint holds (an .npz, a run directory, a '
                           'published name, a timm hub folder) at its own resolution and '
                           'number of classes; --image and --num_classes override them.',
             'image_size': 'Same as --image.'}


def count_flops(model_config: Any, image_size: int, num_classes: int = 1000) -> Dict[str, int]:
  """Forward FLOPs per image by part (keys from `PARTS`, 'resnet' only for hybrids,
  'relative_position' only for posemb='relative') + 'total', by the counter its family's record
  (`families.FAMILIES`) names.

  Args:
    model_config: a model ConfigDict (or dict with the same fields) of a counted family.
    image_size: square input side in pixels.
    num_classes: head outputs; 0 for none.

  Raises:
    ValueError: a family no analytic counter counts (its record names none), in one line.
  """
  return counter_of(model_config).count(model_config, image_size, num_classes)


def counter_of(model_config: Any) -> 'FlopsCounter':
  """The FLOPs counter of the model's family, or one line saying there is none."""
  family = presets.record_of(model_config)
  if family.flops is None:
    counted = ', '.join(f.title for f in families.FAMILIES.values() if f.flops)
    raise ValueError(f'flops counts {counted} models; {model_config.get("model_name")} is a '
                     f'{family.title} model, which it does not count.')
  return families.resolve(family.flops)


def _variant(model_config: Any, change: str) -> Tuple[Any, int]:
  """A copy of the config with one dimension doubled, and the image-size multiplier."""
  config = ml_collections.ConfigDict(model_config.to_dict())  # An unlocked copy.
  if change in ('hidden size', 'depth'):
    counter_of(config).doubled(config, change)
  elif change == 'patch size':
    config.patches.size = tuple(2 * p for p in config.patches.size)
  return config, 2 if change == 'image side' else 1


def scaling_table(model_config: Any, image_size: int,
                  num_classes: int = 1000) -> List[Dict[str, Any]]:
  """How attention (scores + weighted sum) and total FLOPs change when one dimension doubles."""
  base = count_flops(model_config, image_size, num_classes)
  rows = []
  for change in ('baseline', 'hidden size', 'image side', 'patch size', 'depth'):
    config, scale = _variant(model_config, change)
    flops = count_flops(config, image_size * scale, num_classes)
    rows.append({'change': change if change == 'baseline' else f'{change} ×2',
                 'attention': flops.get('attention', 0), 'total': flops['total'],
                 'attention_ratio': _ratio(flops.get('attention', 0), base.get('attention', 0)),
                 'total_ratio': _ratio(flops['total'], base['total'])})
  return rows


def _ratio(value: int, base: int) -> float:
  """value / base; NaN where the base has none (a counter without an attention part)."""
  return value / base if base else math.nan


def xla_flops(model: Any, image_size: int, num_classes: int = 1000) -> float:
  """XLA's cost-analysis FLOPs of the compiled batch-1 forward; params are never materialised.

  Args:
    model: a preset name or a model ConfigDict.
    image_size: square input side.
    num_classes: head outputs.
  """
  import jax
  import jax.numpy as jnp
  model = models.get_model(model, num_classes=num_classes)
  images = jax.ShapeDtypeStruct((1, image_size, image_size, 3), jnp.float32)
  params = jax.eval_shape(lambda x: model.init(jax.random.key(0), x, train=False), images)
  forward = jax.jit(lambda p, x: model.apply(p, x, train=False))
  cost = forward.lower(params, images).compile().cost_analysis()
  if isinstance(cost, (list, tuple)):  # Older jax returned one dict per computation.
    cost = cost[0]
  return float(cost['flops'])


def format_report(config: Any, image_size: int, num_classes: int,
                  xla: Optional[float] = None) -> str:
  """The breakdown and the doubling table of a model ConfigDict as plain text."""
  model_name = config.get('model_name') or 'model'
  flops = count_flops(config, image_size, num_classes)
  total = flops['total']
  unit, scale = ('GFLOP', 1e9) if total >= 1e8 else ('MFLOP', 1e6)
  lines = [f'{model_name} at {image_size}x{image_size}, {num_classes} classes: '
           f'forward FLOPs per image (2 × MACs)']
  for part in (*PARTS, 'total'):
    if part in flops:
      lines.append(f'  {part:20s} {flops[part] / scale:10.4f} {unit}  {flops[part] / total:6.1%}')
  if xla is not None:
    lines.append(f'  XLA cost analysis    {xla / scale:10.4f} {unit}  ({xla / total - 1:+.2%} vs '
                 'analytic; XLA also counts norms, softmax, GELU, adds)')
  lines += ['', f'  {"change":16s} {"attention " + unit:>16s} {"×":>7s} {"total " + unit:>12s} '
            f'{"×":>7s}']
  for row in scaling_table(config, image_size, num_classes):
    lines.append(f'  {row["change"]:16s} {row["attention"] / scale:16.4f} '
                 f'{row["attention_ratio"]:7.2f} {row["total"] / scale:12.4f} '
                 f'{row["total_ratio"]:7.2f}')
  return '\n'.join(lines)


def size_table(configs: Sequence[Any], sizes: Sequence[int], num_classes: int = 1000) -> str:
  """Attention and total GFLOP per image against the image side, one row per model and side.

  ViTs attend over all tokens (attention ∝ tokens²); a Swin within windows (∝ tokens).
  """
  lines = [f'{"model":14s} {"side":>5s} {"tokens":>7s} {"attention GFLOP":>16s} '
           f'{"x prev":>7s} {"total GFLOP":>12s} {"attention share":>16s}']
  for config in configs:
    name, previous = config.get('model_name') or 'model', None
    for side in sizes:
      flops = count_flops(config, side, num_classes)
      tokens = counter_of(config).tokens(config, side)
      attention = flops.get('attention', 0)
      growth = f'{attention / previous:7.2f}' if previous else f'{"":7s}'
      lines.append(f'{name:14s} {side:5d} {tokens:7d} '
                   f'{attention / 1e9:16.3f} {growth} {flops["total"] / 1e9:12.3f} '
                   f'{attention / flops["total"]:16.1%}')
      previous = attention
  return '\n'.join(lines)


def _model(checkpoint: Optional[str]) -> Tuple[Any, Optional[int], Optional[int]]:
  """(model ConfigDict, its image size, its classes): --checkpoint's model, else --model's.

  With --checkpoint, --model is only a check (when given): the file says what it is.
  """
  if not checkpoint:
    return models.get_config(cli.MODEL.value), None, None
  loaded = loading.load_model(checkpoint, cli.MODEL.value if cli.MODEL.present else None,
                              cli.IMAGE_SIZE.value)
  return loaded.config, loaded.image_size, loaded.num_classes


def main(argv: Sequence[str]) -> str:
  """The FLOPs report of --model or --checkpoint at --image (or the --sizes table)."""
  if argv[1:]:
    raise ValueError(f'Unexpected arguments {list(argv[1:])}; pass --model=NAME --image=SIZE.')
  config, own_size, own_classes = _model(cli.CHECKPOINT.value)
  num_classes = own_classes if own_classes is not None and not _NUM_CLASSES.present else (
      _NUM_CLASSES.value)
  image = (cli.IMAGE_SIZE.value if cli.IMAGE_SIZE.value is not None else
           own_size if own_size and not _IMAGE.present else _IMAGE.value)
  if image < 1:
    raise ValueError('--image must be a positive number of pixels.')
  also = [models.get_config(name) for name in _ALSO.value]  # Unknown names: the known ones.
  if _SIZES.value:
    if not all(s.isdigit() and int(s) > 0 for s in _SIZES.value):
      raise ValueError(f'--sizes must be positive pixel counts, got {",".join(_SIZES.value)}.')
    return size_table([config, *also], [int(s) for s in _SIZES.value], num_classes)
  count_flops(config, image, num_classes)  # A Mixer or ResNet is refused before XLA compiles.
  xla = xla_flops(config, image, num_classes) if _XLA.value else None
  return format_report(config, image, num_classes, xla)


if __name__ == '__main__':
  cli.run(sys.modules[__name__])
