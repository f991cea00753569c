"""The timm ViT a hub config.json declares, looked up in timm's own definitions, and checked.

`declared_architecture` reads what a file's weights cannot tell (heads, activation, LayerNorm
epsilon, pooling, prefix tokens) from the table generated from timm
(`timm_architectures.ARCHITECTURES`) with the config's `model_args` over it; never from the
architecture's name. `check_declared` refuses, in one line, a declared model this package
cannot run or one its weights contradict. `families.vit.timm.convert_vit` calls both.
"""

from typing import Any, Dict, List, Mapping, Optional, Tuple

from vit_jax.weights.timm import architectures as timm_architectures
from vit_jax.weights.timm.files import TimmFormatError

_ACTIVATIONS = ('gelu', 'gelu_tanh', 'quick_gelu')
# model_args that are table fields under the same name (timm's constructor keywords).
_TABLE_ARGS = frozenset((
    'img_size', 'patch_size', 'embed_dim', 'depth', 'num_heads', 'act_layer', 'global_pool',
    'class_token', 'reg_tokens', 'no_embed_class', 'pre_norm', 'final_norm', 'fc_norm',
    'qkv_bias', 'qk_norm', 'proj_bias', 'init_values', 'pos_embed', 'dynamic_img_size',
    'pool_include_prefix', 'scale_attn_norm', 'scale_mlp_norm', 'num_classes'))
# model_args that change nothing this converter reads (mlp_ratio becomes the table's mlp_dim).
_NEUTRAL_ARGS = frozenset((
    'mlp_ratio', 'in_chans', 'dynamic_img_pad', 'drop_rate', 'pos_drop_rate', 'patch_drop_rate',
    'proj_drop_rate', 'attn_drop_rate', 'drop_path_rate', 'weight_init', 'fix_init', 'distilled',
    'pretrained_strict'))
# What shapes cannot tell; an architecture outside the table must state these in model_args.
_UNDECIDABLE = ('num_heads', 'act_layer')


def _bare_file_architecture(width: int) -> Tuple[Dict[str, Any], List[str]]:
  """A file without config.json: timm's `VisionTransformer()` defaults, each listed."""
  heads = max(width // 64, 1)
  declared = dict(timm_architectures.VIT_DEFAULTS, embed_dim=width, num_heads=heads,
                  global_pool=None, no_embed_class=None)
  return declared, [f'num_heads {heads} (head width 64; shapes cannot tell)',
                    "activation gelu (exact erf, timm's default)",
                    f'layer_norm_eps {declared["norm_eps"]} (timm ViT default)']


def _check_model_args(name: str, args: Mapping[str, Any]) -> None:
  unsupported = sorted(set(args) - _TABLE_ARGS - _NEUTRAL_ARGS)
  if unsupported:
    raise TimmFormatError(f'timm model {name} is not supported: it needs model_args '
                          f'{", ".join(unsupported)}.')


def declared_architecture(hub_config: Optional[dict], width: int
                          ) -> Tuple[Dict[str, Any], List[str]]:
  """(the model config.json declares, in the table's terms; what was assumed).

  The declaration is timm's own definition of the config's `architecture`
  (`timm_architectures.ARCHITECTURES`, generated from timm), with the config's `model_args`
  and top-level `global_pool` over it, as `timm.create_model(architecture, **model_args)`
  builds it. An architecture the table lacks is read from `model_args` over timm's
  `VisionTransformer()` defaults, and must state what shapes cannot tell (`_UNDECIDABLE`).
  Without a config.json (a bare weights file) timm's defaults and heads of width 64 are used
  and listed as assumed. `width` is the weights' embedding width.

  Raises:
    TimmFormatError: one line naming an architecture that nothing describes, and how to.
  """
  if hub_config is None:
    return _bare_file_architecture(width)
  name = str(hub_config.get('architecture') or '')
  args = hub_config.get('model_args') or {}
  _check_model_args(name, args)
  entry, assumed = timm_architectures.ARCHITECTURES.get(name), []
  if entry is None:
    missing = [k for k in _UNDECIDABLE if k not in args]
    if missing:
      example = ', '.join(f'"{k}": ...' for k in missing)
      raise TimmFormatError(
          f'timm architecture {name or "(none named)"} is not in the table of timm '
          f'{timm_architectures.TIMM_VERSION} architectures, and its weights cannot tell '
          f'{" or ".join(missing)}: add "model_args": {{{example}}} to its config.json '
          '(or regenerate the table with benchmarks/gen_timm_architectures.py under a timm '
          'that has it).')
    entry = dict(timm_architectures.VIT_DEFAULTS, embed_dim=width)  # Sizes: the weights'.
    assumed.append(f'layer_norm_eps {entry["norm_eps"]} and the rest model_args leave out: '
                   f'timm\'s VisionTransformer defaults ({name} is not in the table of timm '
                   f'{timm_architectures.TIMM_VERSION})')
  declared = dict(entry)
  declared.update({k: v for k, v in args.items() if k in _TABLE_ARGS})
  if 'mlp_ratio' in args:  # timm: hidden = int(dim * mlp_ratio), the pooling MLP's too.
    declared['mlp_dim'] = int(declared['embed_dim'] * args['mlp_ratio'])
  if declared['attn_pool_latent_len'] is not None:  # timm builds it with the blocks' sizes.
    declared.update(attn_pool_num_heads=declared['num_heads'],
                    attn_pool_mlp_dim=declared['mlp_dim'])
  if 'global_pool' not in args and hub_config.get('global_pool') is not None:
    declared['global_pool'] = hub_config['global_pool']
  return declared, assumed


def _unsupported_parts(d: Mapping[str, Any], sd: Mapping[str, Any]) -> List[str]:
  """What a declared timm ViT has that `VisionTransformer` here does not (empty: none)."""
  return [what for cond, what in (
      (d['block'] != 'Block', f'{d["block"]} blocks'),
      (d['attention'] not in ('Attention', None), f'{d["attention"]} attention'),
      (d['mlp'] not in ('Mlp', None), f'a {d["mlp"]} MLP'),
      (d['norm_layer'] not in ('LayerNorm', None), f'{d["norm_layer"]} normalisation'),
      (d['act_layer'] not in _ACTIVATIONS + (None,), f'the activation {d["act_layer"]!r}'),
      (bool(d['qk_norm']), 'QK normalisation'),
      (bool(d['scale_attn_norm'] or d['scale_mlp_norm']),
       'norms inside attention/MLP (scale-norm)'),
      (d['proj_bias'] is False, 'an attention output projection without bias'),
      (bool(d['embed_norm']), 'a norm after the patch embedding'),
      (d['pos_embed'] not in ('learn', 'none'), f'pos_embed={d["pos_embed"]!r}'),
      ('norm.weight' not in sd and 'fc_norm.weight' not in sd,
       'to end without a LayerNorm (no norm, no fc_norm)'),
      (d['pool_include_prefix'] and d['global_pool'] != 'map',
       'prefix tokens in the average pooling'),
      (d['global_pool'] == 'map' and not d['pool_include_prefix'] and (
          'cls_token' in sd or 'reg_token' in sd), 'attention pooling without the prefix tokens'),
      ((d['attn_pool_latent_len'] or 1) != 1,
       f'a MAP head with {d["attn_pool_latent_len"]} latent queries (supported: 1)'),
  ) if cond]


def check_declared(declared: Mapping[str, Any], sd: Mapping[str, Any], name: str) -> None:
  """One line if the declared model is one this package cannot run or the weights contradict."""
  width, heads = sd['patch_embed.proj.weight'].shape[0], declared['num_heads']
  if width != declared['embed_dim']:
    raise TimmFormatError(
        f'the weights are {width} wide but timm\'s {name} is {declared["embed_dim"]} wide; if '
        f'they are another model, state it: "model_args": {{"embed_dim": {width}, '
        '"num_heads": ...} in config.json.')
  needs = _unsupported_parts(declared, sd)
  if needs:
    raise TimmFormatError(f'timm model {name} is not supported: it needs {"; ".join(needs)}.')
  if width % heads:
    raise TimmFormatError(f'{heads} heads do not divide the width {width} of {name}\'s weights; '
                          'state num_heads in config.json\'s "model_args".')
  pool_heads = declared['attn_pool_num_heads']
  pool_mlp = sd['attn_pool.mlp.fc1.weight'].shape[0] if 'attn_pool.mlp.fc1.weight' in sd else None
  block_mlp = sd['blocks.0.mlp.fc1.weight'].shape[0] if 'blocks.0.mlp.fc1.weight' in sd else None
  if 'attn_pool.latent' in sd and (pool_heads != heads or pool_mlp != block_mlp):
    raise TimmFormatError(f'timm model {name} is not supported: it needs a MAP head of other '
                          f'sizes than its blocks ({pool_heads} heads, MLP {pool_mlp}).')
