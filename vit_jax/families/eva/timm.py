"""timm's `eva` module (EVA, EVA-02, DINOv3, Perception Encoder, RoPE ViTs) ↔ the `Eva` tree.

What a hub folder's weights cannot tell (the rotary embedding's kind and settings, heads,
pooling, epsilon, the attention's and MLP's layout) is timm's own definition of its
`architecture` (the generated table, `timm_architectures.ARCHITECTURES`, family 'eva'), with the
config.json's `model_args` and `global_pool` over it. `eva_fields` turns an entry into `Eva`
fields or names, in one line, what the model here does not have (Sapiens2's grouped-query
attention and RMSNorm, EVA-02-E's post-norm blocks). The parameter names both ways are one rule
list (`_rules`), built from the entry's layout (fused or separate q/k/v, EVA's q/v biases or
timm's `AttentionRope` biases, packed or split SwiGLU), so reading and exporting cannot drift.
"""

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from vit_jax.weights import npz_format
from vit_jax.weights.timm import architectures as timm_architectures
from vit_jax.weights.timm.files import Converted, StateDict, TimmFormatError

FAMILY = 'eva'
ROPE_KINDS = {None: 'none', 'cat': 'axial', 'mixed': 'mixed', 'dinov3': 'centered'}
_POOLS = {('token', True): 'token', ('avg', True): 'token_gap', ('avg', False): 'gap',
          ('map', False): 'map', ('map', True): 'token_map', ('', True): 'token_unpooled',
          ('', False): 'unpooled'}
# model_args keys that are table fields under another name, and the ones that change nothing
# this converter reads (dropouts, training-time RoPE augmentations).
_ARG_NAMES = {'num_reg_tokens': 'reg_tokens', 'use_abs_pos_emb': None, 'ref_feat_shape':
              'rope_reference', 'rope_temperature': 'rope_temperature', 'use_fc_norm': 'fc_norm',
              'use_pre_transformer_norm': 'pre_norm', 'use_post_transformer_norm': 'final_norm'}
_SIZE_ARGS = ('img_size', 'patch_size', 'embed_dim', 'depth', 'num_heads', 'global_pool',
              'class_token', 'no_embed_class', 'dynamic_img_size', 'num_classes', 'init_values',
              'qk_norm')
_NEUTRAL_ARGS = ('mlp_ratio', 'in_chans', 'drop_rate', 'pos_drop_rate', 'patch_drop_rate',
                 'proj_drop_rate', 'attn_drop_rate', 'drop_path_rate', 'head_init_scale',
                 'dynamic_img_pad', 'rope_shift_coords', 'rope_jitter_coords',
                 'rope_rescale_coords')


def is_eva(state_dict: Mapping[str, Any], timm_config: Optional[dict]) -> bool:
  """timm's eva module: the table says so for a named architecture; a file without one is
  claimed by the parameters only EVA's attention and MLPs have (and then refused: its rotary
  settings are not in the weights)."""
  entry = timm_architectures.ARCHITECTURES.get(str((timm_config or {}).get('architecture')))
  if entry is not None:
    return entry['family'] == FAMILY
  return any(re.match(r'blocks\.0\.(attn\.(q_bias|q_proj\.weight)|mlp\.fc1_g\.weight|gamma_1)$',
                      k) or k == 'rope.freqs' for k in state_dict)


def declared(timm_config: Optional[dict]) -> Dict[str, Any]:
  """The table's entry for config.json's architecture with its model_args over it."""
  name = str((timm_config or {}).get('architecture') or '')
  entry = timm_architectures.ARCHITECTURES.get(name)
  if timm_config is None or entry is None or entry['family'] != FAMILY:
    raise TimmFormatError(
        f'an EVA-family model{" " + name if name else ""} whose rotary embedding and layout its '
        f'weights cannot tell: give it a config.json naming one of the '
        f'{sum(e["family"] == FAMILY for e in timm_architectures.ARCHITECTURES.values())} eva '
        f'architectures of timm {timm_architectures.TIMM_VERSION} ("architecture": ...).')
  out = dict(entry)
  args = dict(timm_config.get('model_args') or {})
  if timm_config.get('global_pool') is not None:
    args.setdefault('global_pool', timm_config['global_pool'])
  unknown = sorted(k for k in args if k not in _SIZE_ARGS + _NEUTRAL_ARGS + tuple(_ARG_NAMES))
  if unknown:
    raise TimmFormatError(f'timm model {name} is not supported: it needs model_args '
                          f'{", ".join(unknown)}.')
  for key, value in args.items():
    if key in _SIZE_ARGS:
      out[key] = value
    elif _ARG_NAMES.get(key):
      out[_ARG_NAMES[key]] = value
  if 'use_abs_pos_emb' in args:
    out['pos_embed'] = 'learn' if args['use_abs_pos_emb'] else 'none'
  return out


def unsupported_parts(entry: Mapping[str, Any]) -> List[str]:
  """What an entry has that `Eva` does not, in words (empty: it runs here)."""
  parts = [
      (entry['block'] != 'EvaBlock', 'post-norm blocks (EVA-02-E)'),
      (entry['norm_layer'] != 'LayerNorm', f'{entry["norm_layer"]} norms'),
      (entry['num_kv_heads'] != entry['num_heads'], 'grouped-query attention'),
      (entry['gated_attn'], 'gated attention'),
      (entry['attn_only_layer_scale'], 'layer scale on the attention branch only'),
      (not entry['proj_bias'], 'an attention output projection without bias'),
      (entry['rope'] not in ROPE_KINDS, f'{entry["rope"]} rotary embeddings'),
      (entry['rope'] == 'cat' and (entry.get('rope_in_pixels') or entry.get('rope_grid')
                                   not in (None, 'index')), 'pixel-frequency rotary bands'),
      (entry['rope'] == 'dinov3' and entry.get('rope_normalize') != 'separate',
       f'rotary coordinates normalised by {entry.get("rope_normalize")}'),
      (entry['mlp'] == 'mlp' and entry['mlp_norm'], 'a LayerNorm inside a plain MLP'),
      (entry['mlp'] != 'mlp' and entry['act_layer'] != 'silu', 'a GLU other than SwiGLU'),
      (entry['mlp'] == 'mlp' and entry['act_layer'] not in ('gelu', 'gelu_tanh', 'quick_gelu'),
       f'a {entry["act_layer"]} MLP'),
      ((entry['global_pool'], entry['class_token']) not in _POOLS,
       f'global_pool={entry["global_pool"]!r}'),
      ((entry['attn_pool_latent_len'] or 1) != 1, 'attention pooling with several queries'),
  ]
  return [what for cond, what in parts if cond]


def eva_fields(entry: Mapping[str, Any], sd: Mapping[str, Any], name: str) -> Dict[str, Any]:
  """`Eva` fields of a declared entry (sizes from the weights `sd`); one line if it cannot run."""
  needs = unsupported_parts(entry)
  if needs:
    raise TimmFormatError(f'timm model {name} is not supported: it needs {"; ".join(needs)}.')
  width, _, patch, _ = sd['patch_embed.proj.weight'].shape
  if width != entry['embed_dim'] or width % entry['num_heads']:
    raise TimmFormatError(
        f'the weights are {width} wide but timm\'s {name} is {entry["embed_dim"]} wide with '
        f'{entry["num_heads"]} heads; if they are another model, state it: "model_args": '
        f'{{"embed_dim": {width}, "num_heads": ...}} in config.json.')
  depth = len({k.split('.')[1] for k in sd if k.startswith('blocks.')})
  mlp_dim = (sd['blocks.0.mlp.fc1_g.weight'].shape[0] if entry['mlp'] == 'swiglu' else
             sd['blocks.0.mlp.fc1.weight'].shape[0] // 2 if entry['mlp'] == 'swiglu_packed'
             else sd['blocks.0.mlp.fc1.weight'].shape[0])
  reference = entry['rope_reference'] if entry['rope'] == 'cat' else None
  pool = entry['global_pool'] if entry['global_pool'] is not None else 'avg'
  return dict(
      family=FAMILY, model_name=name, patches={'size': (patch, patch)}, hidden_size=int(width),
      transformer=dict(num_layers=depth, mlp_dim=int(mlp_dim), num_heads=entry['num_heads'],
                       dropout_rate=0., attention_dropout_rate=0.),
      classifier=_POOLS[(pool, entry['class_token'])], representation_size=None,
      posemb='learn' if 'pos_embed' in sd else 'none',
      activation=entry['act_layer'] if entry['mlp'] == 'mlp' else 'gelu',
      layer_norm_eps=entry['norm_eps'],
      layer_scale=float(entry['init_values'] or 1e-5) if 'blocks.0.gamma_1' in sd else 0.,
      num_registers=int(sd['reg_token'].shape[1]) if 'reg_token' in sd else 0,
      distilled=False, no_embed_class=bool(entry['no_embed_class']),
      norm_pre='norm_pre.weight' in sd, fc_norm='fc_norm.weight' in sd,
      patch_bias='patch_embed.proj.bias' in sd, rope=ROPE_KINDS[entry['rope']],
      rope_temperature=float(entry['rope_temperature'] or 10_000.),
      rope_offset=float(entry['rope_offset'] or 0.),
      rope_reference=None if reference is None else tuple(reference),
      rope_xy=bool(entry['rope_xy']), rope_half=bool(entry['rope_half']),
      qkv_bias=entry['qkv_bias'], qk_norm=bool(entry['qk_norm']),
      attention_norm=bool(entry['scale_attn_norm']),
      mlp='mlp' if entry['mlp'] == 'mlp' else 'swiglu', mlp_norm=bool(entry['mlp_norm']),
      final_norm='norm.weight' in sd or 'fc_norm.weight' in sd,
      map_heads=entry['attn_pool_num_heads'], map_mlp_dim=(
          sd['attn_pool.mlp.fc1.weight'].shape[0] if 'attn_pool.mlp.fc1.weight' in sd else None))


# --- Parameter names both ways: (timm name, Flax path, kind) rules for one layout. ---

def _linear(timm: str, flax: str, bias: bool = True, kind: str = 'dense') -> List[tuple]:
  return [(f'{timm}.weight', f'{flax}/kernel', kind)] + (
      [(f'{timm}.bias', f'{flax}/bias', 'copy')] if bias else [])


def _norm(timm: str, flax: str) -> List[tuple]:
  return [(f'{timm}.weight', f'{flax}/scale', 'copy'), (f'{timm}.bias', f'{flax}/bias', 'copy')]


def _block_rules(i: int, entry: Mapping[str, Any], config: Mapping[str, Any]) -> List[tuple]:
  """One block's rules; the attention's and MLP's layout is the entry's (timm's storage)."""
  t, f = f'blocks.{i}', f'Transformer/encoderblock_{i}'
  attn, a = f'{t}.attn', f'{f}/MultiHeadDotProductAttention_0'
  bias = entry['qkv_bias']
  rules = _norm(f'{t}.norm1', f'{f}/LayerNorm_0') + _norm(f'{t}.norm2', f'{f}/LayerNorm_1')
  if entry['qkv_fused']:
    rules.append((f'{attn}.qkv.weight', a, 'qkv_kernel'))
    if bias == 'qkv':
      rules.append((f'{attn}.qkv.bias', a, 'qkv_bias'))
    elif bias == 'qv':
      rules += [(f'{attn}.q_bias', f'{a}/query/bias', 'heads_bias'),
                (f'{attn}.v_bias', f'{a}/value/bias', 'heads_bias')]
  else:
    for short, name in (('q', 'query'), ('k', 'key'), ('v', 'value')):
      biased = bias == 'qkv' or (bias == 'qv' and short != 'k')
      rules += _linear(f'{attn}.{short}_proj', f'{a}/{name}', biased, 'heads_in')
      if biased:
        rules[-1] = (rules[-1][0], rules[-1][1], 'heads_bias')
  if config['qk_norm']:
    rules += _norm(f'{attn}.q_norm', f'{a}/q_norm') + _norm(f'{attn}.k_norm', f'{a}/k_norm')
  if config['attention_norm']:
    rules += _norm(f'{attn}.norm', f'{a}/norm')
  rules += _linear(f'{attn}.proj', f'{a}/out', kind='out')
  if config['layer_scale']:
    rules += [(f'{t}.gamma_1', f'{f}/ls1', 'copy'), (f'{t}.gamma_2', f'{f}/ls2', 'copy')]
  if entry['mlp'] == 'mlp':
    rules += _linear(f'{t}.mlp.fc1', f'{f}/MlpBlock_0/Dense_0')
    rules += _linear(f'{t}.mlp.fc2', f'{f}/MlpBlock_0/Dense_1')
  else:
    s = f'{f}/SwiGLU_0'
    if entry['mlp'] == 'swiglu_packed':
      rules += [(f'{t}.mlp.fc1.weight', s, 'glu_kernel'), (f'{t}.mlp.fc1.bias', s, 'glu_bias')]
    else:
      rules += _linear(f'{t}.mlp.fc1_g', f'{s}/gate') + _linear(f'{t}.mlp.fc1_x', f'{s}/up')
    if config['mlp_norm']:
      rules += _norm(f'{t}.mlp.norm', f'{s}/norm')
    rules += _linear(f'{t}.mlp.fc2', f'{s}/down')
  return rules


def _rules(entry: Mapping[str, Any], config: Mapping[str, Any], num_classes: int
           ) -> List[tuple]:
  """Every parameter's rule for a model of `config` stored in the entry's timm layout."""
  depth = config['transformer']['num_layers']
  classifier = config['classifier']
  rules = _linear('patch_embed.proj', 'embedding', config['patch_bias'], 'conv')
  if classifier in ('token', 'token_gap', 'token_map', 'token_unpooled'):
    rules.append(('cls_token', 'cls', 'copy'))
  if config['num_registers']:
    rules.append(('reg_token', 'reg', 'copy'))
  if config['posemb'] == 'learn':
    rules.append(('pos_embed', 'Transformer/posembed_input/pos_embedding', 'copy'))
  if config['rope'] == 'mixed':
    rules.append(('rope.freqs', 'Transformer', 'per_block_freqs'))
  if config['norm_pre']:
    rules += _norm('norm_pre', 'Transformer/norm_pre')
  for i in range(depth):
    rules += _block_rules(i, entry, config)
  if config['final_norm'] and not config['fc_norm']:
    rules += _norm('norm', 'Transformer/encoder_norm')
  if config['fc_norm']:
    rules += _norm('fc_norm', 'fc_norm')
  if classifier in ('map', 'token_map'):
    m = 'MAPHead_0/MultiHeadDotProductAttention_0'
    rules += [('attn_pool.latent', 'MAPHead_0/probe', 'copy'),
              ('attn_pool.q.weight', f'{m}/query/kernel', 'heads_in'),
              ('attn_pool.q.bias', f'{m}/query/bias', 'heads_bias'),
              ('attn_pool.kv.weight', m, 'kv_kernel'), ('attn_pool.kv.bias', m, 'kv_bias')]
    rules += _linear('attn_pool.proj', f'{m}/out', kind='out')
    rules += _norm('attn_pool.norm', 'MAPHead_0/LayerNorm_0')
    rules += _linear('attn_pool.mlp.fc1', 'MAPHead_0/MlpBlock_0/Dense_0')
    rules += _linear('attn_pool.mlp.fc2', 'MAPHead_0/MlpBlock_0/Dense_1')
  if num_classes:
    rules += _linear('head', 'head')
  return rules


_SPLITS = {'qkv': ('query', 'key', 'value'), 'kv': ('key', 'value'), 'glu': ('gate', 'up')}


def _heads(path: str, config: Mapping[str, Any]) -> int:
  pooling = path.startswith('MAPHead_0') and config['map_heads']
  return pooling or config['transformer']['num_heads']


def _to_flax(kind: str, a: np.ndarray, heads: int) -> Dict[str, np.ndarray]:
  """{leaf below the rule's path ('' = the path): array} of timm array `a`."""
  single = {'copy': lambda: a, 'dense': lambda: a.T,
            'conv': lambda: a.transpose(2, 3, 1, 0),  # (out, in, h, w) → HWIO.
            'out': lambda: a.T.reshape(heads, -1, a.shape[0]),  # (D, H*hd) → (H, hd, D).
            'heads_in': lambda: a.T.reshape(a.shape[1], heads, -1),  # (H*hd, D) → (D, H, hd).
            'heads_bias': lambda: a.reshape(heads, -1)}
  if kind in single:
    return {'': single[kind]()}
  if kind == 'per_block_freqs':  # (2, depth, heads, hd/2) → each block's (2, heads, hd/2).
    return {f'encoderblock_{i}/rope_freqs': a[:, i] for i in range(a.shape[1])}
  split, leaf = kind.split('_')
  names = _SPLITS[split]
  parts = np.split(a, len(names), axis=0)
  if split == 'glu':  # Packed SwiGLU: the gate's rows first (timm's gate_last=False).
    return {f'{n}/{leaf}': p.T if leaf == 'kernel' else p for n, p in zip(names, parts)}
  if leaf == 'kernel':
    return {f'{n}/kernel': p.T.reshape(a.shape[1], heads, -1) for n, p in zip(names, parts)}
  return {f'{n}/bias': p.reshape(heads, -1) for n, p in zip(names, parts)}


def _to_timm(kind: str, leaves: Mapping[str, np.ndarray]) -> np.ndarray:
  """The inverse of `_to_flax`."""
  if kind == 'per_block_freqs':
    return np.stack([leaves[k] for k in sorted(leaves, key=lambda k: int(
        re.search(r'(\d+)', k).group(1)))], axis=1)
  if kind.split('_')[0] in _SPLITS:
    split, leaf = kind.split('_')
    arrays = [leaves[f'{n}/{leaf}'] for n in _SPLITS[split]]
    if split == 'glu':
      return np.concatenate([p.T if leaf == 'kernel' else p for p in arrays])
    if leaf == 'kernel':
      return np.concatenate([p.reshape(p.shape[0], -1).T for p in arrays])
    return np.concatenate([p.reshape(-1) for p in arrays])
  a = leaves['']
  return {'copy': lambda: a, 'dense': lambda: a.T, 'conv': lambda: a.transpose(3, 2, 0, 1),
          'out': lambda: a.reshape(-1, a.shape[-1]).T,
          'heads_in': lambda: a.reshape(a.shape[0], -1).T,
          'heads_bias': lambda: a.reshape(-1)}[kind]()


def _leaf_names(kind: str, path: str, depth: int) -> Dict[str, str]:
  """{leaf below the rule's path: flat Flax name} a rule reads or writes."""
  if kind == 'per_block_freqs':
    return {f'encoderblock_{i}/rope_freqs': f'{path}/encoderblock_{i}/rope_freqs'
            for i in range(depth)}
  if kind.split('_')[0] in _SPLITS:
    split, leaf = kind.split('_')
    return {f'{n}/{leaf}': f'{path}/{n}/{leaf}' for n in _SPLITS[split]}
  return {'': path}


def state_to_flat(sd: Mapping[str, np.ndarray], rules: Sequence[tuple],
                  config: Mapping[str, Any]) -> Dict[str, np.ndarray]:
  """Flat Flax params of an eva state dict; unknown or missing names are one line."""
  unknown = sorted(set(sd) - {r[0] for r in rules})
  missing = sorted({r[0] for r in rules} - set(sd))
  if unknown or missing:
    what = (f'parameters this layout has no place for ({", ".join(unknown[:3])})' if unknown
            else f'missing parameters ({", ".join(missing[:3])})')
    raise TimmFormatError(f'timm model {config["model_name"]}: {what}; is config.json\'s '
                          'architecture the one these weights were saved from?')
  flat = {}
  for timm, path, kind in rules:
    for leaf, value in _to_flax(kind, np.asarray(sd[timm], np.float32),
                                _heads(path, config)).items():
      flat[f'{path}/{leaf}' if leaf else path] = value
  return flat


def flat_to_state(flat: Mapping[str, Any], rules: Sequence[tuple], depth: int) -> StateDict:
  """The timm state dict of flat Flax params (the inverse of `state_to_flat`)."""
  state, used = {}, set()
  for timm, path, kind in rules:
    names = _leaf_names(kind, path, depth)
    state[timm] = np.ascontiguousarray(_to_timm(
        kind, {leaf: np.asarray(flat[name], np.float32) for leaf, name in names.items()}))
    used.update(names.values())
  unused = sorted(set(flat) - used)
  if unused:
    raise TimmFormatError(f'timm\'s Eva has no place for {", ".join(unused[:3])}: this model '
                          'cannot be exported to timm.')
  return state


def _preprocessing(timm_config: Mapping[str, Any], entry: Mapping[str, Any]
                   ) -> Tuple[tuple, tuple, Optional[int], List[str]]:
  """(mean, std, image size, assumed) of the weights: config.json's pretrained_cfg, else the
  architecture's published weights' (when they all agree), else one line asking for it."""
  cfg = timm_config.get('pretrained_cfg') or {}
  if cfg.get('mean') and cfg.get('std'):
    size = cfg.get('input_size')
    return tuple(cfg['mean']), tuple(cfg['std']), int(size[-1]) if size else None, []
  published = list((entry.get('weights') or {}).values())
  kinds = {(tuple(w['mean']), tuple(w['std'])) for w in published}
  if len(kinds) != 1:
    raise TimmFormatError(
        f'timm model {entry.get("model_name", timm_config.get("architecture"))}: config.json '
        'has no pretrained_cfg and its published weights differ in mean and std; add '
        '"pretrained_cfg": {"mean": [...], "std": [...], "input_size": [3, H, W]}.')
  (mean, std), = kinds
  size = published[0]['input_size'][-1]
  return mean, std, int(size), [f'mean {mean}, std {std} and {size}px (timm\'s published '
                                'weights of this architecture; no pretrained_cfg)']


def convert_eva(state_dict: StateDict, timm_config: Optional[dict]) -> Converted:
  """A timm eva-module state dict → Converted (see the module docstring)."""
  entry = declared(timm_config)
  name = str(timm_config['architecture'])
  config = eva_fields(entry, state_dict, name)
  num_classes = int(state_dict['head.weight'].shape[0]) if 'head.weight' in state_dict else 0
  flat = state_to_flat(state_dict, _rules(entry, config, num_classes), config)
  mean, std, image_size, assumed = _preprocessing(timm_config, dict(entry, model_name=name))
  if image_size is None:
    size = entry['img_size']
    image_size = size if isinstance(size, int) else None
  return Converted(params=npz_format.unflatten(flat), model_config=config,
                   num_classes=num_classes, image_size=image_size, mean=mean, std=std,
                   assumed=tuple(assumed + ['drop-path rate (training only; not in the file)']))


def export_args(config: Mapping[str, Any], num_classes: int, image_size: int
                ) -> Tuple[str, Dict[str, Any], Dict[str, Any]]:
  """(architecture, model_args, its entry) for `timm.create_model`: the config's `model_name`,
  which must be one of timm's eva architectures; model_args for what differs from it."""
  name = str(config.get('model_name') or '')
  entry = timm_architectures.ARCHITECTURES.get(name)
  if entry is None or entry['family'] != FAMILY:
    raise TimmFormatError(f'an EVA-family model is exported under its timm architecture, and '
                          f'{name or "this model"} is none: set model_name to one of timm\'s '
                          'eva architectures.')
  t = config['transformer']
  if (config['hidden_size'], t['num_heads']) != (entry['embed_dim'], entry['num_heads']) or (
      config['patches']['size'][0] != entry['patch_size']):
    raise TimmFormatError(f'this model\'s widths or patch differ from timm\'s {name}; '
                          'export_timm keeps the architecture\'s sizes.')
  args: Dict[str, Any] = {'num_classes': int(num_classes)}
  if entry['img_size'] != image_size:
    args['img_size'] = int(image_size)
  if t['num_layers'] != entry['depth']:
    args['depth'] = int(t['num_layers'])
  pool = {v: k for k, v in _POOLS.items()}[config['classifier']][0]
  if pool != entry['global_pool']:
    args['global_pool'] = pool
  return name, args, entry


def export_state(params: Mapping[str, Any], config: Mapping[str, Any], entry: Mapping[str, Any],
                 num_classes: int) -> StateDict:
  """The timm state dict of `params`, in the architecture's storage layout."""
  flat = npz_format.flatten(params)
  return flat_to_state(flat, _rules(entry, config, num_classes),
                       config['transformer']['num_layers'])
