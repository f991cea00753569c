"""timm's VisionTransformer ↔ this package's ViT: parameter names both ways, and the converter.

The timm ↔ Flax names of the ViT families live in `_VIT_NAMES`, used both ways: reading a
state dict (`vit_state_to_flat`, `convert_vit`: AugReg, DeiT, DeiT-III, DINOv2, CLIP, SigLIP,
MAE) and exporting one (`vit_flat_to_state`, used by `timm_export`).
"""

import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from vit_jax import families
from vit_jax import presets
from vit_jax.weights import npz_format
from vit_jax.weights.timm import architectures as timm_architectures
from vit_jax.weights.timm import declared as timm_declared
from vit_jax.weights.timm.files import Converted, StateDict, TimmFormatError, UnknownParameters


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


def is_vit(state_dict: Mapping[str, Any], timm_config: Optional[dict]) -> bool:
  """timm's VisionTransformer (and DeiT's distilled subclass): fused qkv, no CNN stem."""
  name = str((timm_config or {}).get('architecture', ''))
  entry = timm_architectures.ARCHITECTURES.get(name)
  if entry is not None:  # timm's definition says; its parts are checked on conversion.
    return (families.FAMILIES[entry['family']].timm_vit
            and 'patch_embed.proj.weight' in state_dict)
  if name and not name.startswith(('vit_', 'deit_', 'deit3_', 'vit-')):
    return False
  if name.startswith(('vit_base_r', 'vit_large_r', 'vit_small_r', 'vit_tiny_r')):
    return False
  return 'patch_embed.proj.weight' in state_dict and 'blocks.0.attn.qkv.weight' in state_dict


def _classifier(has_cls: bool, pool: str, name: str) -> str:
  table = {('token', True): 'token', ('avg', True): 'token_gap', ('avg', False): 'gap',
           ('map', False): 'map', ('', True): 'token_unpooled', ('', False): 'unpooled'}
  if (pool, has_cls) not in table:
    raise TimmFormatError(f'timm model {name or "(no config.json)"} is not supported: it needs '
                          f'global_pool={pool!r} with class_token={has_cls}.')
  return table[(pool, has_cls)]


def _global_pool(sd: Mapping[str, Any], declared: Mapping[str, Any]
                 ) -> Tuple[str, Optional[str]]:
  pool = declared['global_pool']
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
  return presets.square_side(rows) is not None and presets.square_side(rows - prefix) is None


def _preprocessing(config: Optional[dict]) -> Tuple[Tuple[float, ...], Tuple[float, ...],
                                                    Optional[int]]:
  cfg = (config or {}).get('pretrained_cfg', {})
  size = cfg.get('input_size')
  return (tuple(cfg.get('mean', presets.OFFICIAL_MEAN)),
          tuple(cfg.get('std', presets.OFFICIAL_STD)),
          int(size[-1]) if size else None)


def _vit_fields(sd: Mapping[str, np.ndarray], declared: Mapping[str, Any], name: str,
                image_size: Optional[int]) -> Tuple[Dict[str, Any], List[str]]:
  """The `VisionTransformer` fields: sizes and parts from the weights, the rest declared."""
  width, _, patch, _ = sd['patch_embed.proj.weight'].shape
  pool, pool_note = _global_pool(sd, declared)
  has_cls = 'cls_token' in sd
  registers = sd['reg_token'].shape[1] if 'reg_token' in sd else 0
  prefix = int(has_cls) + int('dist_token' in sd) + registers
  rows = sd['pos_embed'].shape[1] if 'pos_embed' in sd else 0
  no_embed_class = declared['no_embed_class']
  if no_embed_class is None:
    no_embed_class = _no_embed_class(
        rows, prefix, (image_size // patch) ** 2 if image_size else None)
  fields = dict(presets.VIT_EXTRAS, family='vit')
  fields.update(
      model_name=name or 'timm-vit', patches={'size': (patch, patch)}, hidden_size=width,
      transformer=dict(num_layers=len({k.split('.')[1] for k in sd if k.startswith('blocks.')}),
                       mlp_dim=sd['blocks.0.mlp.fc1.weight'].shape[0],
                       num_heads=declared['num_heads'], dropout_rate=0.,
                       attention_dropout_rate=0.),
      classifier=_classifier(has_cls, pool, name), representation_size=None,
      posemb='learn' if rows else 'none', activation=declared['act_layer'],
      layer_norm_eps=declared['norm_eps'],
      layer_scale=float(declared['init_values'] or 1e-5) if 'blocks.0.ls1.gamma' in sd else 0.,
      num_registers=registers, distilled='dist_token' in sd, no_embed_class=bool(no_embed_class),
      norm_pre='norm_pre.weight' in sd, fc_norm='fc_norm.weight' in sd,
      patch_bias='patch_embed.proj.bias' in sd)
  if fields['classifier'] == 'map' and sd['attn_pool.latent'].shape[1] != 1:
    raise TimmFormatError(f'timm model {name} is not supported: it needs a MAP head with '
                          f'{sd["attn_pool.latent"].shape[1]} latent queries (supported: 1).')
  return fields, [pool_note] if pool_note else []


def _zero_qkv_bias(flat: Dict[str, np.ndarray], layers: int, heads: int, width: int) -> None:
  """timm models built with qkv_bias=False: zero biases give the same attention here."""
  for i in range(layers):
    for n in _SPLITS['qkv']:
      key = f'Transformer/encoderblock_{i}/MultiHeadDotProductAttention_0/{n}/bias'
      flat.setdefault(key, np.zeros((heads, width // heads), np.float32))


def convert_vit(state_dict: StateDict, timm_config: Optional[dict]) -> Converted:
  """A timm VisionTransformer (AugReg, DeiT, DeiT-III, DINOv2, CLIP, SigLIP, MAE) → Converted.

  What the weights' shapes cannot tell (heads, activation, LayerNorm epsilon, pooling, whether
  the position table covers the prefix tokens) is read from `timm_declared.declared_architecture`.
  """
  name = str((timm_config or {}).get('architecture', ''))
  width = state_dict['patch_embed.proj.weight'].shape[0]
  declared, assumed = timm_declared.declared_architecture(timm_config, width)
  timm_declared.check_declared(declared, state_dict, name or '(no config.json)')
  heads = declared['num_heads']
  flat, unknown = vit_state_to_flat(state_dict, heads)
  if unknown:
    raise UnknownParameters(unknown)
  mean, std, image_size = _preprocessing(timm_config)
  fields, pool_note = _vit_fields(state_dict, declared, name, image_size)
  _zero_qkv_bias(flat, fields['transformer']['num_layers'], heads, width)
  if image_size is None and 'pos_embed' in state_dict:
    side = presets.square_side(
        state_dict['pos_embed'].shape[1] - presets.posemb_prefix_tokens(fields))
    image_size = side * fields['patches']['size'][0] if side is not None else None
  if timm_config is None:
    assumed.append(f'mean {mean} and std {std} of the input (no config.json)')
  num_classes = state_dict['head.weight'].shape[0] if 'head.weight' in state_dict else 0
  return Converted(params=npz_format.unflatten(flat), model_config=fields,
                   num_classes=int(num_classes), image_size=image_size, mean=mean, std=std,
                   assumed=tuple(assumed + pool_note))
