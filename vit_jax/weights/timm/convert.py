"""timm-format checkpoints in this package's terms: read, then convert by the family registry.

    state_dict, timm_config = read_timm('hf-hub:timm/vit_small_patch14_dinov2.lvd142m')
    converted = convert(state_dict, timm_config)   # params, model_config, num_classes, assumed

Families register a converter in `CONVERTERS`: a `Converter(name, detect, convert)` whose
`detect(state_dict, timm_config) -> bool` claims a state dict and whose `convert(state_dict,
timm_config) -> Converted` builds the tree; adding a family is one more entry. Files are found
and read by `timm_files`; the ViT names live in `families/vit/timm.py`; `timm_export` writes
hub folders.
"""

import dataclasses
import re
from typing import Any, List, Mapping, Optional, Tuple

from vit_jax.weights import architecture
from vit_jax.families.eva import timm as eva_timm
from vit_jax.families.swin import timm as swin_timm
from vit_jax.weights.timm import files as timm_files
from vit_jax.families.vit import timm as timm_vit
from vit_jax.weights.npz_format import CheckpointError
from vit_jax.weights.timm.files import Converted, Converter, StateDict, TimmFormatError


def read_timm(path_or_name: str) -> Tuple[StateDict, Optional[dict]]:
  """(state dict of numpy arrays, timm config.json or None) of a timm-format checkpoint.

  Args:
    path_or_name: a hub folder (config.json + model.safetensors), a `.safetensors` file (its
      folder's config.json is used when there is one) or `hf-hub:<org>/<name>`.
  """
  weights, config = timm_files.local_files(path_or_name)
  return timm_files.read_safetensors(weights), timm_files.read_config(config)


def convert(state_dict: StateDict, timm_config: Optional[dict]) -> Converted:
  """The first registered family that claims `state_dict` converts it; else one line why not.

  The class names config.json declares come with it (`timm_files.declared_label_names`).
  """
  for converter in CONVERTERS:
    if converter.detect(state_dict, timm_config):
      try:
        converted = converter.convert(state_dict, timm_config)
      except timm_files.UnknownParameters as e:
        raise TimmFormatError(unsupported_reason(dict.fromkeys(e.names), timm_config)) from None
      return dataclasses.replace(converted, class_names=timm_files.declared_label_names(
          timm_config, converted.num_classes))
  raise TimmFormatError(unsupported_reason(state_dict, timm_config))


def load(path_or_name: str) -> Converted:
  """`read_timm` then `convert`."""
  return convert(*read_timm(path_or_name))


def load_as_checkpoint(path_or_name: str) -> Converted:
  """`load`, failing with the `CheckpointError` every checkpoint reader raises."""
  try:
    return load(path_or_name)
  except TimmFormatError as e:
    raise CheckpointError(str(e)) from None


_UNSUPPORTED_NAMES = (
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


def _is_swin(state_dict: Mapping[str, Any], timm_config: Optional[dict]) -> bool:
  del timm_config  # The parameter names decide (timm's and the official layout alike).
  return swin_timm.is_swin_state_dict(state_dict)


def convert_swin(state_dict: StateDict, timm_config: Optional[dict]) -> Converted:
  """A timm Swin Transformer v1 (`swin_timm`) → Converted, named as the preset it matches."""
  try:
    params, fields, assumed = swin_timm.convert(state_dict, timm_config)
    model_config = architecture.architecture(params).config.to_dict()
  except (swin_timm.SwinConversionError, KeyError) as e:
    name = (timm_config or {}).get('architecture', 'this Swin model')
    raise TimmFormatError(f'timm model {name} is not supported: {e}') from None
  mean, std, normalization_note = swin_timm.normalization(timm_config)
  return Converted(params=params, model_config=model_config,
                   num_classes=fields['num_classes'], image_size=fields['image_size'],
                   mean=mean, std=std, assumed=tuple(assumed + normalization_note))


CONVERTERS: List[Converter] = [
    # Before the ViT's: a file without config.json with EVA's parameters is EVA's to refuse.
    Converter('EVA (EVA-02, DINOv3, Perception Encoder, RoPE ViTs)', eva_timm.is_eva,
              eva_timm.convert_eva),
    Converter('ViT (AugReg, DeiT, DeiT-III, DINOv2, CLIP, SigLIP, MAE)', timm_vit.is_vit,
              timm_vit.convert_vit),
    Converter('Swin Transformer v1', _is_swin, convert_swin),
]
