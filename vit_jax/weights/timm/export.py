"""Writes this package's ViTs as timm hub folders (config.json + model.safetensors).

`timm.create_model(architecture, pretrained=True, pretrained_cfg_overlay=dict(file=...),
**model_args)` (both from the written config.json) then loads them in PyTorch.
"""

import importlib
import json
import math
import os
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from vit_jax import presets
from vit_jax.weights import npz_format
from vit_jax.weights.timm import architectures as timm_architectures
from vit_jax.families.vit import timm as timm_vit
from vit_jax.weights.timm.files import CONFIG_FILE, WEIGHTS_FILE, TimmFormatError


def _timm_pool(classifier: str) -> Tuple[bool, str]:
  """(class_token, global_pool) of timm for a `classifier` value."""
  return {'token': (True, 'token'), 'token_gap': (True, 'avg'), 'gap': (False, 'avg'),
          'map': (False, 'map'), 'token_unpooled': (True, ''),
          'unpooled': (False, '')}[classifier]


def _architecture(c: Mapping[str, Any]) -> str:
  """The timm architecture to write: the config's `model_name` when the table has it in the
  config's family, else timm's ViT-B/16 (DeiT's distilled one), with every differing size in
  model_args."""
  name = str(c.get('model_name') or '')
  entry = timm_architectures.ARCHITECTURES.get(name)
  if entry is not None and entry['family'] == presets.family_of(c):
    return name
  return 'deit_base_distilled_patch16_224' if c.get('distilled') else 'vit_base_patch16_224'


def _mlp_ratio(mlp_dim: int, width: int) -> float:
  """A ratio with int(width * ratio) == mlp_dim, as timm sizes the MLP."""
  ratio = mlp_dim / width
  return ratio if int(width * ratio) == mlp_dim else (mlp_dim + 0.5) / width


def _differing(args: Dict[str, Any], entry: Mapping[str, Any]) -> Dict[str, Any]:
  """`args` less what timm's definition of the architecture already says."""
  same = {k for k, v in args.items() if k in entry and entry[k] == v}
  if 'embed_dim' in same and int(args['embed_dim'] * args['mlp_ratio']) == entry['mlp_dim']:
    same.add('mlp_ratio')  # Else timm sizes the MLP from its own ratio and the written width.
  if (args['init_values'] is None) == (entry['init_values'] is None):
    same.add('init_values')  # An init value only: the weights hold the trained scale.
  if 'global_pool' not in same:
    same.discard('fc_norm')  # timm derives fc_norm from global_pool unless it is given.
  same.discard('num_classes')  # Always written: the head of these weights.
  return {k: v for k, v in args.items() if k not in same}


def timm_model_args(model_config: Mapping[str, Any], num_classes: int,
                    image_size: int) -> Tuple[str, Dict[str, Any]]:
  """(architecture, model_args) for `timm.create_model(architecture, **model_args)`.

  The architecture is the config's `model_name` when timm has it (`timm_architectures`), else
  timm's ViT-B/16 (DeiT's distilled one); model_args hold what differs from timm's definition
  of that architecture (and the number of classes), so timm builds the same model.

  Raises:
    TimmFormatError: for what timm's ViT cannot hold (hybrids, pre_logits, 2-D or sin-cos
      position embeddings, a LayerNorm epsilon its architecture does not have).
  """
  c = model_config
  record = presets.record_of(c)
  if not record.timm_vit:  # timm may have the family, but this writer knows its ViT only.
    raise TimmFormatError(f'timm\'s ViT cannot represent this model (a {record.title}); '
                          'export_timm writes ViTs only.')
  problem = ('a ResNet stem' if record.resnet_root else
             'pre_logits' if c.get('representation_size') is not None else
             f'posemb {c.get("posemb")}' if c.get('posemb', 'learn') not in ('learn', 'none')
             else None)
  name = _architecture(c)
  entry = timm_architectures.ARCHITECTURES[name]
  if problem is None and not math.isclose(c.get('layer_norm_eps', 1e-6), entry['norm_eps']):
    problem = (f'LayerNorm epsilon {c.get("layer_norm_eps")}; timm\'s {name} has '
               f'{entry["norm_eps"]}')
  if problem is None and c.get('patch_bias', True) == c.get('norm_pre', False):
    problem = 'a patch-embedding bias together with norm_pre, or neither (timm: one of them)'
  if problem:
    raise TimmFormatError(f'timm\'s ViT cannot represent this model ({problem}).')
  class_token, pool = _timm_pool(c['classifier'])
  t = c['transformer']
  args = dict(
      img_size=int(image_size), patch_size=int(c['patches']['size'][0]),
      embed_dim=int(c['hidden_size']), depth=int(t['num_layers']),
      num_heads=int(t['num_heads']), mlp_ratio=_mlp_ratio(t['mlp_dim'], c['hidden_size']),
      num_classes=int(num_classes), class_token=class_token, global_pool=pool,
      act_layer=c.get('activation', 'gelu_tanh'), qkv_bias=True,
      init_values=c.get('layer_scale') or None, reg_tokens=int(c.get('num_registers', 0)),
      no_embed_class=bool(c.get('no_embed_class')), pre_norm=bool(c.get('norm_pre')),
      fc_norm=bool(c.get('fc_norm')), pos_embed='none' if c.get('posemb') == 'none' else 'learn')
  return name, _differing(args, entry)


def export(params: Mapping[str, Any], model_config: Mapping[str, Any], directory: str, *,
           num_classes: int, image_size: int, mean: Sequence[float] = presets.OFFICIAL_MEAN,
           std: Sequence[float] = presets.OFFICIAL_STD,
           label_names: Optional[Sequence[str]] = None) -> str:
  """Writes `params` as a timm hub folder (config.json + model.safetensors); returns its path.

  `timm.create_model(architecture, pretrained=True, pretrained_cfg_overlay=dict(file=
  <folder>/model.safetensors), **model_args)` (both from config.json) or
  `timm.create_model('local-dir:<folder>', pretrained=True)` then loads it. `label_names` (the
  head's class names, in order) go where timm's hub configs keep them (top-level
  `label_names`; timm reads them into `pretrained_cfg`).
  """
  from safetensors.numpy import save_file
  name, args, state, pool = _timm_weights(params, model_config, num_classes, image_size)
  config = dict(
      architecture=name, num_classes=int(num_classes),
      num_features=int(model_config['hidden_size']), global_pool=pool, model_args=args,
      pretrained_cfg=dict(input_size=[3, int(image_size), int(image_size)],
                          fixed_input_size=True, interpolation='bilinear', crop_pct=1.0,
                          crop_mode='center', mean=list(mean), std=list(std),
                          num_classes=int(num_classes), first_conv='patch_embed.proj',
                          classifier='head'))
  if label_names:
    if len(label_names) != num_classes:
      raise TimmFormatError(f'{len(label_names)} class names for a head of {num_classes} '
                            'outputs; the run\'s metadata.json does not describe these weights.')
    config['label_names'] = [str(name) for name in label_names]
  os.makedirs(directory, exist_ok=True)
  for filename, write in ((WEIGHTS_FILE, lambda p: save_file(state, p)),
                          (CONFIG_FILE, lambda p: _write_json(config, p))):
    path = os.path.join(directory, filename)
    tmp = f'{path}.tmp-{os.getpid()}'
    write(tmp)
    os.replace(tmp, path)
  return directory


def _timm_weights(params: Mapping[str, Any], model_config: Mapping[str, Any], num_classes: int,
                  image_size: int) -> Tuple[str, Dict[str, Any], Dict[str, Any], str]:
  """(architecture, model_args, state dict, global_pool): by the family's own timm writer
  where its record names one (timm keeps it apart from its ViT), else by timm's ViT."""
  writer = presets.record_of(model_config).timm_writer
  if writer is None:
    name, args = timm_model_args(model_config, num_classes, image_size)
    state = timm_vit.vit_flat_to_state(npz_format.flatten(params))
    return name, args, state, _timm_pool(model_config['classifier'])[1]
  family = importlib.import_module(writer)
  name, args, entry = family.export_args(model_config, num_classes, image_size)
  state = family.export_state(params, model_config, entry, num_classes)
  return name, args, state, args.get('global_pool', entry['global_pool'])


def _write_json(data: Any, path: str) -> None:
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(data, f, indent=2)
