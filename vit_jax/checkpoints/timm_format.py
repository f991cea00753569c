"""timm-format checkpoints (the Hugging Face hub's `timm/` repositories): read, convert, export.

A timm checkpoint is a PyTorch state dict saved as `model.safetensors`, usually beside a
`config.json` (architecture name, `global_pool`, `model_args`, and `pretrained_cfg` with the
input size, mean and std). This module reads them with safetensors' numpy API (no torch at run
time) from a hub folder, a bare `.safetensors` file or a hub name (`hf-hub:timm/<name>`,
fetched through huggingface_hub: its cache, token and offline mode), converts the state dict
into this package's Linen param tree with a model config, and writes param trees back as timm
hub folders.

    state_dict, timm_config = read_timm('hf-hub:timm/vit_small_patch14_dinov2.lvd142m')
    converted = convert(state_dict, timm_config)   # params, model_config, num_classes, assumed

Families register a converter in `CONVERTERS`: a `Converter(name, detect, convert)` whose
`detect(state_dict, timm_config) -> bool` claims a state dict and whose `convert(state_dict,
timm_config) -> Converted` builds the tree; adding a family is one more entry. The timm ↔ Flax
names of the ViT families live in `_VIT_NAMES`, used both ways.
"""

import dataclasses
import json
import math
import os
import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from vit_jax.checkpoints import swin_timm

HF_PREFIX = 'hf-hub:'
WEIGHTS_FILE = 'model.safetensors'
CONFIG_FILE = 'config.json'
# What an official-format model (x / 127.5 - 1) means in timm's terms.
OFFICIAL_MEAN = OFFICIAL_STD = (0.5, 0.5, 0.5)

StateDict = Dict[str, np.ndarray]


class TimmFormatError(ValueError):
  """A timm-format checkpoint that is missing, unreadable or of an unsupported model."""


@dataclasses.dataclass(frozen=True)
class Converted:
  """A timm state dict in this package's terms.

  Attributes:
    params: Linen param tree (numpy arrays).
    model_config: plain dict of `VisionTransformer` fields (presets.VIT_EXTRAS included).
    num_classes: outputs of the head; 0 without one.
    image_size: square input side of the checkpoint (its config's input size, else its grid).
    mean: per-channel mean of the [0, 1] input the weights expect.
    std: per-channel std of the same.
    assumed: what neither the file nor its config.json decided, with the value used.
  """

  params: Dict[str, Any]
  model_config: Dict[str, Any]
  num_classes: int
  image_size: Optional[int]
  mean: Tuple[float, float, float]
  std: Tuple[float, float, float]
  assumed: Tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Converter:
  """One model family: `detect(state_dict, config)` claims a file, `convert` reads it."""

  name: str
  detect: Callable[[Mapping[str, Any], Optional[dict]], bool]
  convert: Callable[[StateDict, Optional[dict]], Converted]


def is_timm_source(path: str) -> bool:
  """A hub name, a `.safetensors` file, or a folder holding a timm config.json + weights."""
  if path.startswith(HF_PREFIX) or path.endswith('.safetensors'):
    return True
  return os.path.isdir(path) and os.path.isfile(os.path.join(path, WEIGHTS_FILE))


def hub_files(repo_id: str) -> Tuple[str, Optional[str]]:
  """(weights, config.json or None) of hub repository `repo_id`, through huggingface_hub.

  huggingface_hub decides cache, token and offline mode (`HF_HOME`, `HF_TOKEN`,
  `HF_HUB_OFFLINE=1`); nothing here talks to the network itself.
  """
  import huggingface_hub  # Only needed for hub names.
  from huggingface_hub import errors
  try:
    weights = huggingface_hub.hf_hub_download(repo_id, WEIGHTS_FILE)
  except (errors.HfHubHTTPError, errors.LocalEntryNotFoundError, OSError, ValueError) as e:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise TimmFormatError(
        f'Could not get {WEIGHTS_FILE} of hub repository {repo_id} ({first}); check the name, '
        'your network or HF_TOKEN, or download the folder and pass its path.') from None
  try:
    config = huggingface_hub.hf_hub_download(repo_id, CONFIG_FILE)
  except (errors.HfHubHTTPError, errors.LocalEntryNotFoundError, OSError, ValueError):
    config = None
  return weights, config


def local_files(path: str) -> Tuple[str, Optional[str]]:
  """(weights, config.json or None) of a hub name, hub folder or `.safetensors` file."""
  if path.startswith(HF_PREFIX):
    return hub_files(path[len(HF_PREFIX):])
  weights = os.path.join(path, WEIGHTS_FILE) if os.path.isdir(path) else path
  if not os.path.isfile(weights):
    raise TimmFormatError(f'Could not find "{weights}"; pass a hub folder (config.json + '
                          f'{WEIGHTS_FILE}), a .safetensors file or hf-hub:timm/<name>.')
  config = os.path.join(os.path.dirname(weights), CONFIG_FILE)
  return weights, config if os.path.isfile(config) else None


def read_safetensors(path: str) -> StateDict:
  """{name: float32/int array} of a safetensors file (bf16/fp16 widened to float32)."""
  from safetensors import SafetensorError
  from safetensors.numpy import load_file
  try:
    tensors = load_file(path)
  except (SafetensorError, OSError, ValueError) as e:
    raise TimmFormatError(f'{path} is not a readable safetensors file ({e}); download or '
                          'export it again.') from None
  return {k: v.astype(np.float32) if v.dtype.kind == 'f' or 'float' in v.dtype.name else v
          for k, v in tensors.items()}


def read_config(path: Optional[str]) -> Optional[dict]:
  if path is None:
    return None
  try:
    with open(path, encoding='utf-8') as f:
      config = json.load(f)
  except (OSError, ValueError) as e:
    raise TimmFormatError(f'{path} is not readable JSON ({e}); fix or delete it.') from None
  if not isinstance(config, dict):
    raise TimmFormatError(f'{path} is not a timm config (a JSON object with "architecture").')
  return config


def read_timm(path_or_name: str) -> Tuple[StateDict, Optional[dict]]:
  """(state dict of numpy arrays, timm config.json or None) of a timm-format checkpoint.

  Args:
    path_or_name: a hub folder (config.json + model.safetensors), a `.safetensors` file (its
      folder's config.json is used when there is one) or `hf-hub:<org>/<name>`.
  """
  weights, config = local_files(path_or_name)
  return read_safetensors(weights), read_config(config)


def convert(state_dict: StateDict, timm_config: Optional[dict]) -> Converted:
  """The first registered family that claims `state_dict` converts it; else one line why not."""
  for converter in CONVERTERS:
    if converter.detect(state_dict, timm_config):
      return converter.convert(state_dict, timm_config)
  raise TimmFormatError(unsupported_reason(state_dict, timm_config))


def load(path_or_name: str) -> Converted:
  """`read_timm` then `convert`."""
  return convert(*read_timm(path_or_name))


def input_normalization(path_or_name: str) -> Tuple[Tuple[float, ...], Tuple[float, ...]]:
  """(mean, std) of the [0, 1] input a timm checkpoint expects, as `load(...)` gives them.

  The config.json's `pretrained_cfg` decides when it has both (no weights are converted);
  otherwise the family's default, from converting the weights.
  """
  weights, config_path = local_files(path_or_name)
  config = read_config(config_path)
  cfg = (config or {}).get('pretrained_cfg') or {}
  if cfg.get('mean') is not None and cfg.get('std') is not None:
    return tuple(float(m) for m in cfg['mean']), tuple(float(s) for s in cfg['std'])
  converted = convert(read_safetensors(weights), config)
  return tuple(converted.mean), tuple(converted.std)


_UNSUPPORTED_NAMES = (
    ('eva', 'rotary position embeddings and SwiGLU MLPs (EVA)'),
    ('swinv2', 'Swin v2 attention (scaled cosine, continuous position bias)'),
    ('beit', 'relative position bias (BEiT)'),
    ('convnext', 'a ConvNeXt (no transformer)'), ('levit', 'LeViT attention'),
    ('vit_base_r50', 'a ResNet stem (load the official npz hybrids instead)'),
)
# Parameter names that mark a feature the ViT here does not have.
_UNSUPPORTED_KEYS = (
    (r'rope|freqs', 'rotary position embeddings (EVA)'),
    (r'mlp\.(fc1_g|fc1_x|w12|w3)', 'a SwiGLU MLP'),
    (r'cpb_mlp|logit_scale', 'Swin v2 attention (scaled cosine, continuous position bias)'),
    (r'relative_position', 'relative-position attention (BEiT)'),
    (r'attn\.(q_norm|k_norm)', 'QK normalisation'),
    (r'attn\.(q_bias|v_bias)', 'separate q/v biases (BEiT/EVA)'),
    (r'mlp\.norm|attn\.norm', 'norms inside attention/MLP (scale-norm)'),
    (r'patch_embed\.backbone', 'a CNN stem (hybrid)'),
    (r'pre_logits', 'a pre_logits layer'),
)


def unsupported_reason(state_dict: Mapping[str, Any], timm_config: Optional[dict]) -> str:
  """One line naming what a timm checkpoint has that no registered family supports."""
  name = (timm_config or {}).get('architecture', 'this model')
  found = [what for pattern, what in _UNSUPPORTED_KEYS
           if any(re.search(pattern, k) for k in state_dict)]
  found += [what for prefix, what in _UNSUPPORTED_NAMES
            if str(name).startswith(prefix) and what not in found]
  families = ', '.join(c.name for c in CONVERTERS)
  missing = '; '.join(found) if found else (
      f'parameters no supported family has ({", ".join(sorted(state_dict)[:3])}, ...)')
  return (f'timm model {name} is not supported: it needs {missing}; supported timm families: '
          f'{families}.')


# timm name ↔ Flax path ↔ how the array changes. '{i}' is a block index. Kinds ending in a
# letter split one timm tensor over several Flax leaves below the Flax path.
def _linear(timm: str, flax: str, kind: str = 'dense') -> Tuple[Tuple[str, str, str], ...]:
  return ((f'{timm}.weight', f'{flax}/kernel', kind), (f'{timm}.bias', f'{flax}/bias', 'copy'))


def _norm(timm: str, flax: str) -> Tuple[Tuple[str, str, str], ...]:
  return ((f'{timm}.weight', f'{flax}/scale', 'copy'), (f'{timm}.bias', f'{flax}/bias', 'copy'))


_BLOCK = 'Transformer/encoderblock_{i}'
_MAP = 'MAPHead_0'
_VIT_NAMES = (
    ('cls_token', 'cls', 'copy'), ('dist_token', 'dist', 'copy'), ('reg_token', 'reg', 'copy'),
    ('pos_embed', 'Transformer/posembed_input/pos_embedding', 'copy'),
    ('patch_embed.proj.weight', 'embedding/kernel', 'conv'),
    ('patch_embed.proj.bias', 'embedding/bias', 'copy'),
    *_norm('norm_pre', 'Transformer/norm_pre'),
    *_norm('blocks.{i}.norm1', f'{_BLOCK}/LayerNorm_0'),
    ('blocks.{i}.attn.qkv.weight', f'{_BLOCK}/MultiHeadDotProductAttention_0', 'qkv_kernel'),
    ('blocks.{i}.attn.qkv.bias', f'{_BLOCK}/MultiHeadDotProductAttention_0', 'qkv_bias'),
    *_linear('blocks.{i}.attn.proj', f'{_BLOCK}/MultiHeadDotProductAttention_0/out', 'out'),
    ('blocks.{i}.ls1.gamma', f'{_BLOCK}/ls1', 'copy'),
    ('blocks.{i}.ls2.gamma', f'{_BLOCK}/ls2', 'copy'),
    *_norm('blocks.{i}.norm2', f'{_BLOCK}/LayerNorm_1'),
    *_linear('blocks.{i}.mlp.fc1', f'{_BLOCK}/MlpBlock_0/Dense_0'),
    *_linear('blocks.{i}.mlp.fc2', f'{_BLOCK}/MlpBlock_0/Dense_1'),
    *_norm('norm', 'Transformer/encoder_norm'),
    *_norm('fc_norm', 'fc_norm'),
    *_linear('head', 'head'), *_linear('head_dist', 'head_dist'),
    ('attn_pool.latent', f'{_MAP}/probe', 'copy'),
    ('attn_pool.q.weight', f'{_MAP}/MultiHeadDotProductAttention_0/query/kernel', 'heads_in'),
    ('attn_pool.q.bias', f'{_MAP}/MultiHeadDotProductAttention_0/query/bias', 'heads_bias'),
    ('attn_pool.kv.weight', f'{_MAP}/MultiHeadDotProductAttention_0', 'kv_kernel'),
    ('attn_pool.kv.bias', f'{_MAP}/MultiHeadDotProductAttention_0', 'kv_bias'),
    *_linear('attn_pool.proj', f'{_MAP}/MultiHeadDotProductAttention_0/out', 'out'),
    *_norm('attn_pool.norm', f'{_MAP}/LayerNorm_0'),
    *_linear('attn_pool.mlp.fc1', f'{_MAP}/MlpBlock_0/Dense_0'),
    *_linear('attn_pool.mlp.fc2', f'{_MAP}/MlpBlock_0/Dense_1'),
)
_SPLITS = {'qkv': ('query', 'key', 'value'), 'kv': ('key', 'value')}


def _pattern(template: str) -> 're.Pattern':
  return re.compile(re.escape(template).replace(r'\{i\}', r'(\d+)') + '$')


_TIMM_RULES = [(_pattern(t), f, kind) for t, f, kind in _VIT_NAMES]


def _to_flax(kind: str, a: np.ndarray, heads: int) -> Dict[str, np.ndarray]:
  """{Flax leaf path below the rule's path ('' = the path itself): array} of timm array `a`."""
  if kind == 'copy':
    return {'': a}
  if kind == 'dense':
    return {'': a.T}
  if kind == 'conv':  # (out, in, h, w) → HWIO.
    return {'': a.transpose(2, 3, 1, 0)}
  if kind == 'out':  # (D, heads*hd) → (heads, hd, D).
    return {'': a.T.reshape(heads, -1, a.shape[0])}
  if kind == 'heads_in':  # (heads*hd, D) → (D, heads, hd).
    return {'': a.T.reshape(a.shape[1], heads, -1)}
  if kind == 'heads_bias':
    return {'': a.reshape(heads, -1)}
  split, leaf = kind.split('_')
  names = _SPLITS[split]
  if leaf == 'kernel':  # (n*heads*hd, D) → n × (D, heads, hd).
    parts = a.reshape(len(names), heads, -1, a.shape[-1]).transpose(0, 3, 1, 2)
    return {f'{n}/kernel': p for n, p in zip(names, parts)}
  parts = a.reshape(len(names), heads, -1)
  return {f'{n}/bias': p for n, p in zip(names, parts)}


def _to_timm(kind: str, leaves: Mapping[str, np.ndarray]) -> np.ndarray:
  """The inverse of `_to_flax`: the timm array from the Flax leaves it was split into."""
  if _split(kind):
    split, leaf = kind.split('_')
    arrays = [leaves[f'{n}/{leaf}'] for n in _SPLITS[split]]
    if leaf == 'kernel':  # n × (D, heads, hd) → (n*heads*hd, D).
      return np.concatenate([a.reshape(a.shape[0], -1).T for a in arrays])
    return np.concatenate([a.reshape(-1) for a in arrays])
  a = leaves['']
  if kind == 'dense':
    return a.T
  if kind == 'conv':
    return a.transpose(3, 2, 0, 1)
  if kind == 'out':
    return a.reshape(-1, a.shape[-1]).T
  if kind == 'heads_in':
    return a.reshape(a.shape[0], -1).T
  if kind == 'heads_bias':
    return a.reshape(-1)
  return a


def _split(kind: str) -> bool:
  return kind.split('_')[0] in _SPLITS


def _flax_leaves(flat: Mapping[str, Any], path: str, kind: str
                 ) -> Optional[Dict[str, str]]:
  """{leaf below `path`: flat name} that rule (path, kind) reads, or None if absent."""
  if _split(kind):
    split, leaf = kind.split('_')
    names = {f'{n}/{leaf}': f'{path}/{n}/{leaf}' for n in _SPLITS[split]}
  else:
    names = {'': path}
  return names if all(k in flat for k in names.values()) else None


def vit_state_to_flat(state_dict: Mapping[str, np.ndarray], heads: int
                      ) -> Tuple[Dict[str, np.ndarray], List[str]]:
  """(flat Flax '/'-names → arrays, timm names no rule knows) of a timm ViT state dict."""
  flat, unknown = {}, []
  for name, array in state_dict.items():
    for pattern, flax, kind in _TIMM_RULES:
      match = pattern.match(name)
      if match:
        path = flax.replace('{i}', match.group(1)) if match.groups() else flax
        for leaf, value in _to_flax(kind, np.asarray(array), heads).items():
          flat[f'{path}/{leaf}' if leaf else path] = value
        break
    else:
      unknown.append(name)
  return flat, unknown


def vit_flat_to_state(flat: Mapping[str, Any]) -> StateDict:
  """The timm state dict of a flat Flax ViT param dict ('/'-names); the inverse of the above.

  Raises:
    TimmFormatError: for parameters timm's ViT has no place for (pre_logits, ResNet stems).
  """
  state, used = {}, set()
  blocks = sorted({int(m.group(1)) for k in flat
                   for m in [re.match(r'Transformer/encoderblock_(\d+)/', k)] if m})
  for timm, flax, kind in _VIT_NAMES:
    for i in (blocks if '{i}' in timm else [None]):
      path = flax if i is None else flax.replace('{i}', str(i))
      names = _flax_leaves(flat, path, kind)
      if names is None:
        continue
      leaves = {leaf: np.asarray(flat[name], np.float32) for leaf, name in names.items()}
      state[timm if i is None else timm.replace('{i}', str(i))] = np.ascontiguousarray(
          _to_timm(kind, leaves))
      used.update(names.values())
  unused = sorted(set(flat) - used)
  if unused:
    raise TimmFormatError(f'timm\'s ViT has no place for {", ".join(unused[:3])}: this model '
                          'cannot be exported to timm.')
  return state


# Heads of timm ViTs whose head width is not 64 (the rest: width // 64).
_HEADS_BY_NAME = (('huge', 16), ('so400m', 16), ('so150m', 16), ('gigantic', 16),
                  ('giant_patch14_clip', 16), ('giant_patch14_224', 16))
_ACTIVATIONS = ('gelu', 'gelu_tanh', 'quick_gelu')
# model_args that change nothing this converter must know (sizes are read off the shapes).
_NEUTRAL_ARGS = frozenset((
    'img_size', 'patch_size', 'embed_dim', 'depth', 'num_heads', 'mlp_ratio', 'num_classes',
    'in_chans', 'global_pool', 'class_token', 'reg_tokens', 'no_embed_class', 'init_values',
    'pre_norm', 'fc_norm', 'qkv_bias', 'act_layer', 'dynamic_img_size', 'dynamic_img_pad',
    'drop_rate', 'pos_drop_rate', 'patch_drop_rate', 'proj_drop_rate', 'attn_drop_rate',
    'drop_path_rate', 'weight_init', 'final_norm', 'distilled', 'pretrained_strict'))


def _is_vit(state_dict: Mapping[str, Any], timm_config: Optional[dict]) -> bool:
  """timm's VisionTransformer (and DeiT's distilled subclass): fused qkv, no CNN stem."""
  name = str((timm_config or {}).get('architecture', ''))
  if name and not name.startswith(('vit_', 'deit_', 'deit3_', 'vit-')):
    return False
  if name.startswith(('vit_base_r', 'vit_large_r', 'vit_small_r', 'vit_tiny_r')):
    return False
  return 'patch_embed.proj.weight' in state_dict and 'blocks.0.attn.qkv.weight' in state_dict


def _num_heads(width: int, name: str, args: Mapping[str, Any]) -> Tuple[int, Optional[str]]:
  if args.get('num_heads'):
    return int(args['num_heads']), None
  for part, heads in _HEADS_BY_NAME:
    if part in name:
      return heads, None
  heads = max(width // 64, 1)
  return heads, (None if name else f'num_heads {heads} (head width 64; shapes cannot tell)')


def _activation(name: str, args: Mapping[str, Any]) -> Tuple[str, Optional[str]]:
  act = args.get('act_layer') or ('quick_gelu' if 'quickgelu' in name else 'gelu')
  if act not in _ACTIVATIONS:
    raise TimmFormatError(f'timm model {name or "(no config.json)"} is not supported: it needs '
                          f'the activation {act!r} (supported: {", ".join(_ACTIVATIONS)}).')
  return act, (None if name else "activation gelu (exact erf, timm's default)")


def _classifier(has_cls: bool, pool: str, name: str) -> str:
  table = {('token', True): 'token', ('avg', True): 'token_gap', ('avg', False): 'gap',
           ('map', False): 'map', ('', True): 'token_unpooled', ('', False): 'unpooled'}
  if (pool, has_cls) not in table:
    raise TimmFormatError(f'timm model {name or "(no config.json)"} is not supported: it needs '
                          f'global_pool={pool!r} with class_token={has_cls}.')
  return table[(pool, has_cls)]


def _global_pool(sd: Mapping[str, Any], config: Optional[dict], args: Mapping[str, Any]
                 ) -> Tuple[str, Optional[str]]:
  pool = args.get('global_pool', (config or {}).get('global_pool'))
  if pool is not None:
    return pool, None
  pool = 'map' if 'attn_pool.latent' in sd else 'avg' if (
      'fc_norm.weight' in sd or 'cls_token' not in sd) else 'token'
  return pool, f'global_pool {pool} (from the parameters)'


def _no_embed_class(rows: int, prefix: int, grid: Optional[int]) -> bool:
  """Whether the position table leaves out the prefix tokens (rows = grid instead of both)."""
  if not prefix:
    return False
  if grid is not None:
    return rows == grid
  return math.isqrt(rows) ** 2 == rows and math.isqrt(rows - prefix) ** 2 != rows - prefix


def _preprocessing(config: Optional[dict]) -> Tuple[Tuple[float, ...], Tuple[float, ...],
                                                    Optional[int]]:
  cfg = (config or {}).get('pretrained_cfg', {})
  size = cfg.get('input_size')
  return (tuple(cfg.get('mean', OFFICIAL_MEAN)), tuple(cfg.get('std', OFFICIAL_STD)),
          int(size[-1]) if size else None)


def _vit_fields(sd: Mapping[str, np.ndarray], config: Optional[dict], heads: int,
                image_size: Optional[int]) -> Tuple[Dict[str, Any], List[str]]:
  """The `VisionTransformer` fields of a timm ViT state dict and its config."""
  from vit_jax import presets
  name = str((config or {}).get('architecture', ''))
  args = (config or {}).get('model_args') or {}
  width, _, patch, _ = sd['patch_embed.proj.weight'].shape
  activation, act_note = _activation(name, args)
  pool, pool_note = _global_pool(sd, config, args)
  has_cls = 'cls_token' in sd
  registers = sd['reg_token'].shape[1] if 'reg_token' in sd else 0
  prefix = int(has_cls) + int('dist_token' in sd) + registers
  rows = sd['pos_embed'].shape[1] if 'pos_embed' in sd else 0
  fields = dict(presets.VIT_EXTRAS)
  fields.update(
      model_name=name or 'timm-vit', patches={'size': (patch, patch)}, hidden_size=width,
      transformer=dict(num_layers=len({k.split('.')[1] for k in sd if k.startswith('blocks.')}),
                       mlp_dim=sd['blocks.0.mlp.fc1.weight'].shape[0], num_heads=heads,
                       dropout_rate=0., attention_dropout_rate=0.),
      classifier=_classifier(has_cls, pool, name), representation_size=None,
      posemb='learn' if rows else 'none', activation=activation,
      layer_norm_eps=1e-5 if '_clip_' in name else 1e-6,
      layer_scale=float(args.get('init_values') or 1e-5) if 'blocks.0.ls1.gamma' in sd else 0.,
      num_registers=registers, distilled='dist_token' in sd,
      no_embed_class=_no_embed_class(
          rows, prefix, (image_size // patch) ** 2 if image_size else None),
      norm_pre='norm_pre.weight' in sd, fc_norm='fc_norm.weight' in sd,
      patch_bias='patch_embed.proj.bias' in sd)
  if fields['classifier'] == 'map' and sd['attn_pool.latent'].shape[1] != 1:
    raise TimmFormatError(f'timm model {name} is not supported: it needs a MAP head with '
                          f'{sd["attn_pool.latent"].shape[1]} latent queries (supported: 1).')
  assumed = [n for n in (act_note, pool_note) if n]
  if not name:
    assumed.append(f'layer_norm_eps {fields["layer_norm_eps"]} (timm ViT default)')
  return fields, assumed


def _zero_qkv_bias(flat: Dict[str, np.ndarray], layers: int, heads: int, width: int) -> None:
  """timm models built with qkv_bias=False: zero biases give the same attention here."""
  for i in range(layers):
    for n in _SPLITS['qkv']:
      key = f'Transformer/encoderblock_{i}/MultiHeadDotProductAttention_0/{n}/bias'
      flat.setdefault(key, np.zeros((heads, width // heads), np.float32))


def convert_vit(state_dict: StateDict, timm_config: Optional[dict]) -> Converted:
  """A timm VisionTransformer (AugReg, DeiT, DeiT-III, DINOv2, CLIP, SigLIP, MAE) → Converted."""
  from vit_jax import checkpoint  # The tree's Linen names and unflattening live there.
  name = str((timm_config or {}).get('architecture', ''))
  args = (timm_config or {}).get('model_args') or {}
  width = state_dict['patch_embed.proj.weight'].shape[0]
  heads, heads_note = _num_heads(width, name, args)
  flat, unknown = vit_state_to_flat(state_dict, heads)
  if unknown:
    raise TimmFormatError(unsupported_reason({k: None for k in unknown}, timm_config))
  unsupported = sorted(set(args) - _NEUTRAL_ARGS)
  if unsupported:
    raise TimmFormatError(f'timm model {name} is not supported: it needs model_args '
                          f'{", ".join(unsupported)}.')
  mean, std, image_size = _preprocessing(timm_config)
  fields, assumed = _vit_fields(state_dict, timm_config, heads, image_size)
  _zero_qkv_bias(flat, fields['transformer']['num_layers'], heads, width)
  if image_size is None and 'pos_embed' in state_dict:
    grid = state_dict['pos_embed'].shape[1] - (
        0 if fields['no_embed_class'] else _prefix(fields))
    side = math.isqrt(grid)
    image_size = side * fields['patches']['size'][0] if side * side == grid else None
  if timm_config is None:
    assumed.append(f'mean {mean} and std {std} of the input (no config.json)')
  num_classes = state_dict['head.weight'].shape[0] if 'head.weight' in state_dict else 0
  return Converted(params=checkpoint.unflatten(flat), model_config=fields,
                   num_classes=int(num_classes), image_size=image_size, mean=mean, std=std,
                   assumed=tuple(([heads_note] if heads_note else []) + assumed))


def _prefix(fields: Mapping[str, Any]) -> int:
  from vit_jax import models_vit
  return (int(fields['classifier'] in models_vit.CLASS_TOKEN_CLASSIFIERS)
          + int(fields['distilled']) + fields['num_registers'])


def _is_swin(state_dict: Mapping[str, Any], timm_config: Optional[dict]) -> bool:
  del timm_config  # The parameter names decide (timm's and the official layout alike).
  return swin_timm.is_swin_state_dict(state_dict)


def convert_swin(state_dict: StateDict, timm_config: Optional[dict]) -> Converted:
  """A timm Swin Transformer v1 (`swin_timm`) → Converted, named as the preset it matches."""
  from vit_jax import checkpoint  # Preset matching and custom names live there.
  try:
    params, fields, assumed = swin_timm.convert(state_dict, timm_config)
    model_config = checkpoint.architecture(params).config.to_dict()
  except (swin_timm.SwinConversionError, KeyError) as e:
    name = (timm_config or {}).get('architecture', 'this Swin model')
    raise TimmFormatError(f'timm model {name} is not supported: {e}') from None
  mean, std, normalization_note = swin_timm.normalization(timm_config)
  return Converted(params=params, model_config=model_config,
                   num_classes=fields['num_classes'], image_size=fields['image_size'],
                   mean=mean, std=std, assumed=tuple(assumed + normalization_note))


CONVERTERS: List[Converter] = [
    Converter('ViT (AugReg, DeiT, DeiT-III, DINOv2, CLIP, SigLIP, MAE)', _is_vit, convert_vit),
    Converter('Swin Transformer v1', _is_swin, convert_swin),
]


def _timm_pool(classifier: str) -> Tuple[bool, str]:
  """(class_token, global_pool) of timm for a `classifier` value."""
  return {'token': (True, 'token'), 'token_gap': (True, 'avg'), 'gap': (False, 'avg'),
          'map': (False, 'map'), 'token_unpooled': (True, ''),
          'unpooled': (False, '')}[classifier]


def timm_model_args(model_config: Mapping[str, Any], num_classes: int,
                    image_size: int) -> Tuple[str, Dict[str, Any]]:
  """(architecture, model_args) for `timm.create_model(architecture, **model_args)`.

  The architecture is the config's `model_name` when it is a timm name (its LayerNorm epsilon
  comes from there), else timm's ViT-B/16 (DeiT's distilled one) with every size overridden.

  Raises:
    TimmFormatError: for what timm's ViT cannot hold (hybrids, pre_logits, 2-D or sin-cos
      position embeddings, a LayerNorm epsilon its architecture does not have).
  """
  c = model_config
  problem = ('a ResNet stem' if c.get('resnet') else
             'pre_logits' if c.get('representation_size') is not None else
             f'posemb {c.get("posemb")}' if c.get('posemb', 'learn') not in ('learn', 'none')
             else None)
  name = str(c.get('model_name') or '')
  if not name.startswith(('vit_', 'deit_', 'deit3_')):
    name = 'deit_base_distilled_patch16_224' if c.get('distilled') else 'vit_base_patch16_224'
  eps = 1e-5 if '_clip_' in name else 1e-6
  if problem is None and not math.isclose(c.get('layer_norm_eps', 1e-6), eps):
    problem = f'LayerNorm epsilon {c.get("layer_norm_eps")} with architecture {name}'
  if problem is None and c.get('patch_bias', True) == c.get('norm_pre', False):
    problem = 'a patch-embedding bias together with norm_pre, or neither (timm: one of them)'
  if problem:
    raise TimmFormatError(f'timm\'s ViT cannot represent this model ({problem}).')
  class_token, pool = _timm_pool(c['classifier'])
  t = c['transformer']
  args = dict(
      img_size=int(image_size), patch_size=int(c['patches']['size'][0]),
      embed_dim=int(c['hidden_size']), depth=int(t['num_layers']),
      num_heads=int(t['num_heads']), mlp_ratio=t['mlp_dim'] / c['hidden_size'],
      num_classes=int(num_classes), class_token=class_token, global_pool=pool,
      act_layer=c.get('activation', 'gelu_tanh'), qkv_bias=True,
      init_values=c.get('layer_scale') or None, reg_tokens=int(c.get('num_registers', 0)),
      no_embed_class=bool(c.get('no_embed_class')), pre_norm=bool(c.get('norm_pre')),
      fc_norm=bool(c.get('fc_norm')))
  if c.get('posemb') == 'none':
    args['pos_embed'] = 'none'
  return name, args


def export(params: Mapping[str, Any], model_config: Mapping[str, Any], directory: str, *,
           num_classes: int, image_size: int, mean: Sequence[float] = OFFICIAL_MEAN,
           std: Sequence[float] = OFFICIAL_STD) -> str:
  """Writes `params` as a timm hub folder (config.json + model.safetensors); returns its path.

  `timm.create_model(architecture, pretrained=True, pretrained_cfg_overlay=dict(file=
  <folder>/model.safetensors), **model_args)` (both from config.json) or
  `timm.create_model('local-dir:<folder>', pretrained=True)` then loads it.
  """
  from safetensors.numpy import save_file
  from vit_jax import checkpoint
  name, args = timm_model_args(model_config, num_classes, image_size)
  state = vit_flat_to_state(checkpoint.flatten(params))
  config = dict(
      architecture=name, num_classes=int(num_classes), num_features=int(args['embed_dim']),
      global_pool=args['global_pool'], model_args=args,
      pretrained_cfg=dict(input_size=[3, int(image_size), int(image_size)],
                          fixed_input_size=True, interpolation='bilinear', crop_pct=1.0,
                          crop_mode='center', mean=list(mean), std=list(std),
                          num_classes=int(num_classes), first_conv='patch_embed.proj',
                          classifier='head'))
  os.makedirs(directory, exist_ok=True)
  for filename, write in ((WEIGHTS_FILE, lambda p: save_file(state, p)),
                          (CONFIG_FILE, lambda p: _write_json(config, p))):
    path = os.path.join(directory, filename)
    tmp = f'{path}.tmp-{os.getpid()}'
    write(tmp)
    os.replace(tmp, path)
  return directory


def _write_json(data: Any, path: str) -> None:
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(data, f, indent=2)
