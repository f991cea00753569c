"""timm's Swin Transformer weights → the `models_swin.SwinTransformer` param tree (pure numpy).

Input: a timm state dict of numpy arrays (`safetensors.numpy.load_file`, or torch tensors
`.numpy()`), optionally with the hub folder's `config.json` dict. The original Microsoft layout
(`layers.i.downsample` at the end of stage i, `head.weight`, `model` nesting, saved buffers) is
accepted too, as timm's `checkpoint_filter_fn` accepts it.

The conversion is exact: qkv splits by rows [3, heads, head_dim] into query/key/value, the
output projection's input index is head-major, Linear weights transpose. The weights keep
timm's input normalisation ((x - mean) / std on [0, 1] pixels, `normalization`): it travels
beside them as for every timm family (`timm_files.Converted.mean/std`), and the input
pipeline, predict and analyze apply it. Relative-position tables of another window size are
resized as timm resizes them (`resize_relative_position_bias_table`).
"""

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from vit_jax.families.swin import model as models_swin
from vit_jax import presets
from vit_jax.weights.timm import architectures as timm_architectures

Params = Dict[str, Any]

# timm's IMAGENET_DEFAULT_MEAN / _STD, the published Swin weights' input normalisation.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_TABLE = 'relative_position_bias_table'
_BLOCK = re.compile(r'^layers\.(\d+)\.blocks\.(\d+)\.(.+)$')
_BUFFERS = ('relative_position_index', 'attn_mask')


class SwinConversionError(ValueError):
  """A state dict that is not a timm (or official) Swin Transformer v1 checkpoint."""


def is_swin_state_dict(state_dict: Mapping[str, Any]) -> bool:
  """True for a timm or official Swin v1 state dict (window attention with a bias table)."""
  keys = _unnest(state_dict).keys()
  return (f'layers.0.blocks.0.attn.{_TABLE}' in keys and 'patch_embed.proj.weight' in keys
          and 'layers.0.blocks.0.attn.qkv.weight' in keys)


def _unnest(state_dict: Mapping[str, Any]) -> Mapping[str, Any]:
  """The official .pth files nest the weights under 'model' (some under 'state_dict')."""
  for key in ('model', 'state_dict'):
    if isinstance(state_dict.get(key), Mapping):
      state_dict = state_dict[key]
  return state_dict


def timm_layout(state_dict: Mapping[str, Any]) -> Dict[str, np.ndarray]:
  """timm 1.0 names: drops saved buffers; the official layout's stage-end patch merging
  (`layers.i.downsample`) becomes stage i+1's, and `head.` becomes `head.fc.`."""
  state_dict = _unnest(state_dict)
  official = 'layers.0.downsample.reduction.weight' in state_dict
  out = {}
  for key, value in state_dict.items():
    if any(buffer in key for buffer in _BUFFERS):
      continue
    if official:
      key = re.sub(r'layers\.(\d+)\.downsample',
                   lambda m: f'layers.{int(m.group(1)) + 1}.downsample', key)
      key = key.replace('head.', 'head.fc.')
    out[key] = np.asarray(value, np.float32)
  return out


def _ln(sd: Mapping[str, np.ndarray], prefix: str) -> Params:
  return {'scale': sd[f'{prefix}.weight'], 'bias': sd[f'{prefix}.bias']}


def _dense(sd: Mapping[str, np.ndarray], prefix: str) -> Params:
  out = {'kernel': sd[f'{prefix}.weight'].T}
  if f'{prefix}.bias' in sd:
    out['bias'] = sd[f'{prefix}.bias']
  return out


def _attention(sd: Mapping[str, np.ndarray], prefix: str) -> Params:
  """qkv rows are [3, heads, head_dim]; proj's input index is head-major (h * head_dim + d)."""
  table = sd[f'{prefix}.{_TABLE}']
  heads = table.shape[1]
  qkv_w, qkv_b = sd[f'{prefix}.qkv.weight'], sd.get(f'{prefix}.qkv.bias')
  if qkv_b is None:
    raise SwinConversionError(f'{prefix}.qkv has no bias (qkv_bias=False); the Swin model here '
                              'has query/key/value biases as all published weights do.')
  width = qkv_w.shape[1]
  w = qkv_w.reshape(3, heads, width // heads, width)
  b = qkv_b.reshape(3, heads, width // heads)
  out = {name: {'kernel': w[i].transpose(2, 0, 1), 'bias': b[i]}
         for i, name in enumerate(('query', 'key', 'value'))}
  proj = sd[f'{prefix}.proj.weight']  # (out C, heads * head_dim)
  out['out'] = {'kernel': proj.T.reshape(heads, width // heads, -1),
                'bias': sd[f'{prefix}.proj.bias']}
  out[_TABLE] = table
  return out


def _block(sd: Mapping[str, np.ndarray], prefix: str) -> Params:
  return {'norm1': _ln(sd, f'{prefix}.norm1'), 'attn': _attention(sd, f'{prefix}.attn'),
          'norm2': _ln(sd, f'{prefix}.norm2'), 'fc1': _dense(sd, f'{prefix}.mlp.fc1'),
          'fc2': _dense(sd, f'{prefix}.mlp.fc2')}


def normalization(timm_config: Optional[Mapping[str, Any]]) -> Tuple[tuple, tuple, List[str]]:
  """(mean, std, assumed) of the [0, 1] input the weights expect: config.json's, else timm's
  Swin default (ImageNet), listed as assumed."""
  cfg = (timm_config or {}).get('pretrained_cfg') or {}
  mean, std = cfg.get('mean'), cfg.get('std')
  if mean is not None and std is not None:
    return tuple(mean), tuple(std), []
  return IMAGENET_MEAN, IMAGENET_STD, [
      f'input mean {IMAGENET_MEAN} and std {IMAGENET_STD} (timm\'s Swin default; no '
      'config.json says otherwise)']


def params_from_timm(state_dict: Mapping[str, Any]) -> Params:
  """The Flax param tree of a timm Swin state dict (see module doc)."""
  if not is_swin_state_dict(state_dict):
    raise SwinConversionError('not a Swin Transformer state dict: it lacks patch_embed.proj, '
                              f'layers.0.blocks.0.attn.qkv and .{_TABLE}.')
  sd = timm_layout(state_dict)
  params: Params = {'patch_embed': {'kernel': sd['patch_embed.proj.weight'].transpose(2, 3, 1, 0),
                                    'bias': sd['patch_embed.proj.bias']},
                    'patch_embed_norm': _ln(sd, 'patch_embed.norm'), 'norm': _ln(sd, 'norm')}
  for key in sd:
    match = _BLOCK.match(key)
    if match and match.group(3) == 'norm1.weight':
      stage, block = match.group(1), match.group(2)
      params[f'layers_{stage}_blocks_{block}'] = _block(sd, f'layers.{stage}.blocks.{block}')
    elif key.endswith('downsample.reduction.weight'):
      prefix = key[:-len('.reduction.weight')]
      stage = prefix.split('.')[1]
      params[f'layers_{stage}_downsample'] = {'norm': _ln(sd, f'{prefix}.norm'),
                                              'reduction': _dense(sd, f'{prefix}.reduction')}
  if 'head.fc.weight' in sd:
    params['head'] = _dense(sd, 'head.fc')
  return params


def _shape(x: Any) -> Tuple[int, ...]:
  return tuple(getattr(x, 'shape', x))


def table_window(num_rows: int) -> int:
  """M of a square (2M-1)² relative-position table."""
  side = presets.square_side(num_rows)
  if side is None or side % 2 == 0:
    raise SwinConversionError(f'a relative-position table of {num_rows} rows is not (2M-1)^2 for '
                              'a square window M.')
  return (side + 1) // 2


def swin_fields(tree: Mapping[str, Any]) -> Dict[str, Any]:
  """The shape-decided `SwinTransformer` fields of a Flax Swin tree (arrays or shapes).

  Window: the largest table's M (a stage smaller than the window has a clamped table).
  """
  kernel = _shape(tree['patch_embed']['kernel'])
  blocks: Dict[int, int] = {}
  for key in tree:
    match = re.fullmatch(r'layers_(\d+)_blocks_(\d+)', key)
    if match:
      stage = int(match.group(1))
      blocks[stage] = max(blocks.get(stage, 0), int(match.group(2)) + 1)
  stages = range(len(blocks))
  heads = tuple(_shape(tree[f'layers_{s}_blocks_0']['attn'][_TABLE])[1] for s in stages)
  window = max(table_window(_shape(tree[f'layers_{s}_blocks_{b}']['attn'][_TABLE])[0])
               for s in stages for b in range(blocks[s]))
  hidden = _shape(tree['layers_0_blocks_0']['fc1']['kernel'])
  return dict(patches={'size': tuple(kernel[:2])}, embed_dim=kernel[3],
              depths=tuple(blocks[s] for s in stages), num_heads=heads, window_size=window,
              mlp_ratio=hidden[1] / hidden[0])


def convert(state_dict: Mapping[str, Any], timm_config: Optional[Mapping[str, Any]] = None,
            ) -> Tuple[Params, Dict[str, Any], List[str]]:
  """(Flax params, model config fields, assumed values) of a timm Swin state dict.

  The config has the `presets._swin` fields (model_name left to the caller, which matches it
  against the presets) plus `num_classes` (0 without a head) and `image_size`, the resolution
  the weights were trained at: the config.json's `pretrained_cfg.input_size`, else
  window × 32 (the published pairs 7/224 and 12/384), listed as assumed. The input's mean and
  std are `normalization(timm_config)`'s.
  """
  params, assumed = params_from_timm(state_dict), []
  fields = swin_fields(params)
  check_declared(declared_swin(timm_config), fields)
  fields['num_classes'] = int(params['head']['bias'].shape[0]) if 'head' in params else 0
  size = ((timm_config or {}).get('pretrained_cfg') or {}).get('input_size')
  stride = fields['patches']['size'][0] * 2**(len(fields['depths']) - 1)
  if size:
    fields['image_size'] = int(size[-1])
  else:
    fields['image_size'] = fields['window_size'] * stride
    assumed.append(f'trained at {fields["image_size"]}px (window {fields["window_size"]} x '
                   f'stride {stride}; no config.json input_size)')
  assumed.append('drop-path rate (training only; not in the file)')
  return params, fields, assumed


# The declared parts `models_swin.SwinTransformer` has (timm's names, `timm_architectures`' terms).
_RUNS = dict(act_layer='gelu', norm_layer='LayerNorm', norm_eps=models_swin.LN_EPS, qkv_bias=True,
             absolute_pos_embed=False, global_pool='avg')


def declared_swin(timm_config: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
  """The Swin that config.json declares: the table's entry for its architecture with its
  model_args over it (an architecture the table lacks: timm's `SwinTransformer()` defaults under
  model_args that state `act_layer`); None without a config.json.

  Raises:
    SwinConversionError: one line for an architecture nothing describes, and how to state it.
  """
  if timm_config is None:
    return None
  name = timm_config.get('architecture') or '(none named)'
  args = timm_config.get('model_args') or {}
  entry = timm_architectures.ARCHITECTURES.get(name)
  if entry is None or entry['family'] != 'swin':
    if 'act_layer' not in args:
      raise SwinConversionError(
          f'architecture {name} is not in the table of timm '
          f'{timm_architectures.TIMM_VERSION} architectures, and its weights cannot tell the '
          'activation: add "model_args": {"act_layer": ...} to its config.json.')
    entry = timm_architectures.SWIN_DEFAULTS
  declared = dict(entry)
  declared.update({k: v for k, v in args.items() if k in declared})
  if isinstance(declared['window_size'], int):
    declared['window_size'] = (declared['window_size'],) * len(declared['depths'])
  return declared


def check_declared(declared: Optional[Mapping[str, Any]], fields: Mapping[str, Any]) -> None:
  """One line if the declared Swin is one `models_swin` cannot run or the weights contradict."""
  if declared is None:
    return
  needs = [f'{k}={declared[k]!r}' for k, v in _RUNS.items() if declared[k] != v]
  if len(set(declared['window_size'])) != 1:
    needs.append(f'windows {tuple(declared["window_size"])} differing per stage')
  if needs:
    raise SwinConversionError(f'it needs {", ".join(needs)}.')
  for key in ('embed_dim', 'num_heads'):
    if tuple(np.atleast_1d(declared[key])) != tuple(np.atleast_1d(fields[key])):
      raise SwinConversionError(
          f'its weights have {key} {fields[key]}, the architecture {declared[key]}; state '
          f'the weights\' values in config.json\'s "model_args".')


def _progression_offsets(src: int, dst: int) -> np.ndarray:
  """timm's (BEiT's) source coordinates: offsets spaced by a geometric progression q so that
  the src table's ±(src // 2) offsets span ±(dst // 2), centred on 0."""
  left, right = 1.01, 1.5
  while right - left > 1e-6:
    q = (left + right) / 2.
    if (1. - q**(src // 2)) / (1. - q) > dst // 2:
      right = q
    else:
      left = q
  dis, cur = [], 1.
  for i in range(src // 2):
    dis.append(cur)
    cur += q**(i + 1)
  return np.asarray([-d for d in reversed(dis)] + [0.] + dis)


def _linear_weights(points: np.ndarray, targets: np.ndarray) -> np.ndarray:
  """(len(targets), len(points)) weights of 1-D linear interpolation, clamped at the ends."""
  return np.stack([np.interp(targets, points, np.eye(len(points))[i])
                   for i in range(len(points))], axis=1)


def resize_relative_position_bias_table(table: np.ndarray, new_window: Sequence[int],
                                        old_window: Optional[Sequence[int]] = None) -> np.ndarray:
  """A ((2Mh-1)(2Mw-1), heads) table resized to `new_window` as timm does on loading.

  timm 1.0's `resize_rel_pos_bias_table`: the source offsets are spread by a geometric
  progression (dense near 0, as BEiT), the target offsets are the integers, and each head is
  interpolated linearly (clamped at the border). `old_window` defaults to square.
  """
  table = np.asarray(table)
  rows, heads = table.shape
  if old_window is None:
    side = table_window(rows)
    old_window = (side, side)
  src = (2 * old_window[0] - 1, 2 * old_window[1] - 1)
  dst = (2 * new_window[0] - 1, 2 * new_window[1] - 1)
  if src[0] * src[1] != rows:
    raise SwinConversionError(f'a table of {rows} rows does not fit window {tuple(old_window)}.')
  if src == dst:
    return table
  wy = _linear_weights(_progression_offsets(src[0], dst[0]),
                       np.arange(-(dst[0] // 2), dst[0] // 2 + 1, dtype=np.float64))
  wx = _linear_weights(_progression_offsets(src[1], dst[1]),
                       np.arange(-(dst[1] // 2), dst[1] // 2 + 1, dtype=np.float64))
  grid = table.astype(np.float64).reshape(src[0], src[1], heads)
  resized = np.einsum('ys,sth,xt->yxh', wy, grid, wx)
  return resized.reshape(dst[0] * dst[1], heads).astype(table.dtype)


def fit_relative_position_tables(params: Mapping[str, Any], like: Mapping[str, Any]) -> Params:
  """`params` with every relative-position table resized to the shape it has in `like`.

  `like` is the model's (abstract) param tree: a new window size or resolution (a stage
  smaller than the window has a clamped window) changes the table shapes. A copy; other leaves
  are kept as they are, and names absent from `like` are left for the tree check to report.
  """
  out = {}
  for key, value in params.items():
    target = like.get(key) if isinstance(like, Mapping) else None
    if isinstance(value, Mapping):
      out[key] = fit_relative_position_tables(value, target if isinstance(target, Mapping) else {})
    elif key == _TABLE and target is not None and _shape(target) != np.shape(value):
      side = table_window(_shape(target)[0])
      out[key] = resize_relative_position_bias_table(value, (side, side))
    else:
      out[key] = value
  return out
