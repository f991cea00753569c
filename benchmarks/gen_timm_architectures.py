"""Writes vit_jax/weights/timm/architectures.json: timm's ViT, Swin and EVA architectures, as data.

    python benchmarks/gen_timm_architectures.py

Every architecture of timm's `vision_transformer`, `deit`, `swin_transformer` and `eva` modules with
published weights (`timm.list_models(pretrained=True)`) is built by timm itself on the meta
device (no memory, no weights) and described from the built model: widths, heads, MLP width,
activation, norm and epsilon, pooling, prefix tokens and the block parts this package's loader
must know about. Depth is the factory's own `depth` (or `depths`) argument; the model is built
with one block per stage so that describing all of them takes seconds, not minutes.
tests/test_timm_architectures.py regenerates the table in memory and compares it with the file;
`vit_jax.weights.timm_architectures` reads it.
"""

import contextlib
import functools
import inspect
import json
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

from absl import app
from absl import flags

MODULES = ('vision_transformer', 'deit', 'swin_transformer', 'eva')
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'vit_jax', 'weights', 'timm',
                   'architectures.json')
COMMAND = 'python benchmarks/gen_timm_architectures.py'


def published_architectures() -> List[str]:
  """Names (no weight tag) in `MODULES` with at least one published weight in this timm."""
  import timm
  from timm.models import get_arch_name
  return sorted({get_arch_name(m) for module in MODULES
                 for m in timm.list_models(module=module, pretrained=True)})


@contextlib.contextmanager
def _one_block_per_stage(record: Dict[str, Any]) -> Iterator[None]:
  """Builds ViTs with depth 1 and Swins with one block per stage; records the real depth."""
  from timm.models import eva
  from timm.models import swin_transformer
  from timm.models import vision_transformer
  patched = []
  for cls, key, shallow in ((vision_transformer.VisionTransformer, 'depth', lambda d: 1),
                            (swin_transformer.SwinTransformer, 'depths',
                             lambda d: (1,) * len(d)),
                            (eva.Eva, 'depth', lambda d: 1)):
    original = cls.__init__

    @functools.wraps(original)
    def init(self, *args, _original=original, _key=key, _shallow=shallow, **kwargs):
      bound = inspect.signature(_original).bind(self, *args, **kwargs)
      bound.apply_defaults()
      record[_key] = bound.arguments[_key]
      bound.arguments[_key] = _shallow(bound.arguments[_key])
      heads = bound.arguments.get('num_kv_heads')
      if isinstance(heads, (tuple, list)):  # Per block (Sapiens2): the fewest describe it.
        record['num_kv_heads'] = min(heads)
        bound.arguments['num_kv_heads'] = min(heads)
      _original(*bound.args, **bound.kwargs)

    cls.__init__ = init
    patched.append((cls, original))
  try:
    yield
  finally:
    for cls, original in patched:
      cls.__init__ = original


def _activation(act: Any) -> str:
  name = type(act).__name__
  if name == 'GELU':
    return 'gelu' if act.approximate == 'none' else 'gelu_tanh'
  return {'GELUTanh': 'gelu_tanh', 'QuickGELU': 'quick_gelu', 'SiLU': 'silu'}.get(
      name, name.lower())


def _is(module: Any, name: str = 'Identity') -> bool:
  return module is not None and type(module).__name__ == name


def _norm(norm: Any) -> Tuple[str, float]:
  return type(norm).__name__, float(norm.eps)


def _pair(x: Any) -> int:
  x = tuple(x) if isinstance(x, (tuple, list)) else (x, x)
  if x[0] != x[1]:
    raise ValueError(f'non-square {x}')
  return int(x[0])


def _vit_block(block: Any) -> Dict[str, Any]:
  """What the first block is made of (every block of these models is alike)."""
  attn, mlp = getattr(block, 'attn', None), getattr(block, 'mlp', None)
  if attn is None or mlp is None:  # Parallel blocks fuse both.
    return dict(block=type(block).__name__, attention=None, mlp=None, num_heads=None,
                mlp_dim=None, act_layer=None, norm_layer=None, norm_eps=None, qkv_bias=None,
                qk_norm=None, proj_bias=None, scale_attn_norm=None, scale_mlp_norm=None,
                init_values=None)
  norm, eps = _norm(block.norm1)
  qkv = getattr(attn, 'qkv', None)
  return dict(
      block=type(block).__name__, attention=type(attn).__name__, mlp=type(mlp).__name__,
      num_heads=int(attn.num_heads), mlp_dim=int(mlp.fc2.in_features),
      act_layer=_activation(mlp.act), norm_layer=norm, norm_eps=eps,
      qkv_bias=None if qkv is None else qkv.bias is not None,
      qk_norm=not _is(getattr(attn, 'q_norm', None)),
      proj_bias=attn.proj.bias is not None,
      scale_attn_norm=not _is(getattr(attn, 'norm', None)),
      scale_mlp_norm=not _is(getattr(mlp, 'norm', None)),
      init_values=(float(block.ls1.init_values) if _is(getattr(block, 'ls1', None), 'LayerScale')
                   else None))


def _attn_pool(pool: Any) -> Dict[str, Any]:
  if pool is None:
    return dict(attn_pool_num_heads=None, attn_pool_mlp_dim=None, attn_pool_latent_len=None)
  return dict(attn_pool_num_heads=int(pool.num_heads),
              attn_pool_mlp_dim=int(pool.mlp.fc2.in_features),
              attn_pool_latent_len=int(pool.latent_len))


def _describe_vit(model: Any, depth: int) -> Dict[str, Any]:
  embed = model.patch_embed
  entry = dict(
      family='vit', model_class=type(model).__name__,
      img_size=_pair(embed.img_size), patch_size=_pair(embed.patch_size),
      embed_dim=int(model.embed_dim), depth=int(depth))
  entry.update(_vit_block(model.blocks[0]))
  entry.update(
      global_pool=model.global_pool, class_token=model.cls_token is not None,
      reg_tokens=int(model.num_reg_tokens),
      distilled=getattr(model, 'dist_token', None) is not None,
      no_embed_class=bool(model.no_embed_class),
      pos_embed='none' if model.pos_embed is None else 'learn',
      dynamic_img_size=bool(model.dynamic_img_size),
      pre_norm=not _is(model.norm_pre), final_norm=not _is(model.norm),
      fc_norm=not _is(model.fc_norm), patch_bias=embed.proj.bias is not None,
      embed_norm=not _is(embed.norm), pool_include_prefix=bool(model.pool_include_prefix),
      num_classes=int(model.num_classes))
  entry.update(_attn_pool(model.attn_pool))
  return entry


def _describe_swin(model: Any, depths: Tuple[int, ...]) -> Dict[str, Any]:
  stages = list(model.layers)
  blocks = [stage.blocks[0] for stage in stages]
  norm, eps = _norm(blocks[0].norm1)
  return dict(
      family='swin', model_class=type(model).__name__,
      img_size=_pair(model.patch_embed.img_size), patch_size=_pair(model.patch_embed.patch_size),
      embed_dim=int(model.embed_dim), depths=tuple(int(d) for d in depths),
      num_heads=tuple(int(b.attn.num_heads) for b in blocks),
      window_size=tuple(_pair(b.window_size) for b in blocks),
      mlp_ratio=blocks[0].mlp.fc1.out_features / blocks[0].mlp.fc1.in_features,
      act_layer=_activation(blocks[0].mlp.act), norm_layer=norm, norm_eps=eps,
      qkv_bias=blocks[0].attn.qkv.bias is not None, global_pool=model.head.global_pool.pool_type,
      absolute_pos_embed=getattr(model, 'absolute_pos_embed', None) is not None,
      num_classes=int(model.num_classes))


def _size(x: Any) -> Any:
  """A square size as one int, a non-square one as [height, width] (Sapiens2's 1024x768)."""
  x = tuple(x) if isinstance(x, (tuple, list)) else (x, x)
  return int(x[0]) if x[0] == x[1] else tuple(int(v) for v in x)


def _eva_mlp(mlp: Any) -> Dict[str, Any]:
  """The block's MLP: timm's Mlp, its packed SwiGLU (GluMlp) or the split one (SwiGLU)."""
  kind = type(mlp).__name__
  if kind == 'SwiGLU':
    hidden, mlp_kind = mlp.fc1_g.out_features, 'swiglu'
  elif kind == 'GluMlp':
    hidden, mlp_kind = mlp.fc2.in_features, 'swiglu_packed'
  else:
    hidden, mlp_kind = mlp.fc2.in_features, 'mlp'
  return dict(mlp=mlp_kind, mlp_dim=int(hidden), act_layer=_activation(mlp.act),
              mlp_norm=not _is(getattr(mlp, 'norm', None)))


def _eva_attention(attn: Any) -> Dict[str, Any]:
  """EvaAttention (fused qkv with q/v biases, or q/k/v projections with no key bias) or timm's
  AttentionRope (every projection biased alike); grouped heads, gates, norms."""
  fused = getattr(attn, 'qkv', None) is not None
  if type(attn).__name__ == 'EvaAttention':
    biased = attn.q_bias is not None if fused else attn.q_proj.bias is not None
    bias = 'qv' if biased else 'none'
  else:
    layer = attn.qkv if fused else attn.q_proj
    bias = 'qkv' if layer.bias is not None else 'none'
  return dict(attention=type(attn).__name__, qkv_fused=fused, qkv_bias=bias,
              num_kv_heads=int(getattr(attn, 'num_kv_heads', attn.num_heads)),
              qk_norm=not _is(attn.q_norm), scale_attn_norm=not _is(attn.norm),
              gated_attn=getattr(attn, 'gate', None) is not None,
              proj_bias=attn.proj.bias is not None)


def _eva_rope(rope: Any) -> Dict[str, Any]:
  """The rotary embedding's kind and settings (None where the model has none)."""
  if rope is None:
    return dict(rope=None, rope_temperature=None, rope_offset=None, rope_reference=None,
                rope_xy=None, rope_half=None, rope_in_pixels=None, rope_grid=None,
                rope_normalize=None)
  kind = {'RotaryEmbeddingCat': 'cat', 'RotaryEmbeddingMixed': 'mixed',
          'RotaryEmbeddingDinoV3': 'dinov3'}.get(type(rope).__name__, type(rope).__name__)
  reference = getattr(rope, 'ref_feat_shape', None)
  return dict(
      rope=kind, rope_temperature=float(rope.temperature),
      rope_offset=float(getattr(rope, 'grid_offset', 0.)),
      rope_reference=None if reference is None else tuple(int(v) for v in reference),
      rope_xy=getattr(rope, 'grid_indexing', 'ij') == 'xy',
      rope_half=bool(getattr(rope, 'rotate_half', False)),
      rope_in_pixels=bool(getattr(rope, 'in_pixels', False)),
      rope_grid='centered' if kind == 'dinov3' else getattr(rope, 'grid_type', 'index'),
      rope_normalize=getattr(rope, 'normalize_coords', 'separate'))


def _weights(name: str) -> Dict[str, Dict[str, Any]]:
  """{tag: what timm's pretrained config of `name.tag` says about the input and head}."""
  import timm
  from timm.models import get_pretrained_cfg
  out = {}
  for full in timm.list_models(name, pretrained=True):
    cfg = get_pretrained_cfg(full)
    if full.split('.')[0] != name:
      continue
    out[full.split('.', 1)[1] if '.' in full else ''] = dict(
        input_size=[int(v) for v in cfg.input_size], mean=[float(v) for v in cfg.mean],
        std=[float(v) for v in cfg.std], num_classes=int(cfg.num_classes))
  return out


def _describe_eva(model: Any, depth: int, name: Optional[str]) -> Dict[str, Any]:
  block = model.blocks[0]
  norm, eps = _norm(block.norm1)
  embed = model.patch_embed
  entry = dict(
      family='eva', model_class=type(model).__name__, img_size=_size(embed.img_size),
      patch_size=_pair(embed.patch_size), embed_dim=int(model.embed_dim), depth=int(depth),
      block=type(block).__name__, num_heads=int(block.attn.num_heads), norm_layer=norm,
      norm_eps=eps)
  entry.update(_eva_mlp(block.mlp))
  entry.update(_eva_attention(block.attn))
  gammas = [getattr(block, g, None) for g in ('gamma_1', 'gamma_2')]
  entry.update(
      init_values=None if gammas[0] is None else float(block.init_values),
      attn_only_layer_scale=gammas[0] is not None and gammas[1] is None,
      class_token=model.cls_token is not None,
      reg_tokens=0 if model.reg_token is None else int(model.reg_token.shape[1]),
      no_embed_class=bool(model.no_embed_class),
      pos_embed='none' if model.pos_embed is None else 'learn',
      dynamic_img_size=bool(model.dynamic_img_size))
  entry.update(_eva_rope(model.rope))
  entry.update(
      pre_norm=not _is(model.norm_pre), final_norm=not _is(model.norm),
      fc_norm=not _is(model.fc_norm), patch_bias=embed.proj.bias is not None,
      global_pool=model.global_pool, num_classes=int(model.num_classes))
  entry.update(_attn_pool(model.attn_pool))
  if name is not None:
    entry['weights'] = _weights(name)
  return entry


def describe(name: str) -> Dict[str, Any]:
  """The table entry of timm architecture `name` (see the module docstring)."""
  import timm
  import torch
  record: Dict[str, Any] = {}
  with _one_block_per_stage(record), torch.device('meta'):
    model = timm.create_model(name, pretrained=False)
  if 'depths' in record:
    return _describe_swin(model, record['depths'])
  if type(model).__name__ == 'Eva':
    entry = _describe_eva(model, record['depth'], name)
    entry['num_kv_heads'] = record.get('num_kv_heads', entry['num_kv_heads'])
    return entry
  return _describe_vit(model, record['depth'])


def describe_defaults() -> Dict[str, Dict[str, Any]]:
  """{family: the entry of timm's class built with its constructor's defaults alone}."""
  import torch
  from timm.models import eva
  from timm.models import swin_transformer
  from timm.models import vision_transformer
  record: Dict[str, Any] = {}
  with _one_block_per_stage(record), torch.device('meta'):
    vit = vision_transformer.VisionTransformer()
    swin = swin_transformer.SwinTransformer()
    vit_depth = record['depth']
    eva_default = eva.Eva()
  return {'vit': _describe_vit(vit, vit_depth),
          'swin': _describe_swin(swin, record['depths']),
          'eva': _describe_eva(eva_default, record['depth'], None)}


def table() -> Dict[str, Dict[str, Any]]:
  return {name: describe(name) for name in published_architectures()}


def table_text(entries: Dict[str, Dict[str, Any]], defaults: Dict[str, Dict[str, Any]]) -> str:
  """The JSON file: timm's version, the two classes' defaults, then one line per architecture.

  One entry a line keeps a regeneration's diff to the architectures that changed.
  """
  import timm

  def line(key: str, value: Any) -> str:
    return f'{json.dumps(key)}: {json.dumps(value)}'

  head = [line('timm_version', timm.__version__), line('generated_by', COMMAND),
          line('vit_defaults', defaults['vit']), line('swin_defaults', defaults['swin']),
          line('eva_defaults', defaults['eva'])]
  rows = ',\n'.join('    ' + line(name, entry) for name, entry in entries.items())
  return '{\n' + ''.join(f'  {h},\n' for h in head) + '  "architectures": {\n' + rows + '\n  }\n}\n'


def main(argv: List[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments {argv[1:]}')
  entries = table()
  text = table_text(entries, describe_defaults())
  out = flags.FLAGS.out
  # Whole or not at all: the package reads this file at import, so a half-written one (a
  # failure or an interrupt mid-write) would break every hub load until regenerated.
  with open(out + '.partial', 'w', encoding='utf-8') as f:
    f.write(text)
  os.replace(out + '.partial', out)
  print(f'{len(entries)} architectures -> {out}')


if __name__ == '__main__':
  # Defined here, not at import: the test imports this module beside the tools' own --out.
  flags.DEFINE_string('out', os.path.normpath(OUT), 'Where to write the table (JSON).')
  app.run(main)
