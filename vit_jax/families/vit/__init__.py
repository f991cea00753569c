"""The ViT family: its record here (extra fields, patch-grid geometry, runlocal size; no jax),
and beside it in this folder `model.py` (`VisionTransformer`, officially `models_vit`),
`shapes.py` (`READER`: a file described from its shapes), `timm.py` (timm's ViT names both
ways) and `flops.py` (`COUNTER`). Its presets are built by `presets.vit`.
"""

import ml_collections

from vit_jax.families.vit.presets import PRESETS, WEIGHTS
from vit_jax.families.record import Family, patch_grid, patch_size, rounded_up

# Fields beyond the official ones, each off by default (defaults = official behaviour).
EXTRAS = dict(
    posemb='learn',  # 'learn' (official), 'learn_2d', 'sincos2d', 'relative', 'rope',
    # 'rope_mixed' or 'none'.
    stochastic_depth=0.,  # Max drop-path rate (last block); 0 = off.
    dtype='float32',  # Compute dtype; 'bfloat16' for accelerators (params stay float32).
    remat=False,  # Recompute each block in backward: less activation memory.
    attention_impl='xla',  # 'heads_first' (fastest on CPU) or 'fused' (cuDNN flash on GPU).
    pad_tokens=0,  # Pad tokens once, before the blocks, to a multiple of this (masked); 0 = off.
    head_bias_init=0.,  # -10 for sigmoid pretraining (big_vision i21k).
    # What timm's ViT families need (weights/timm_vit.py reads their files); all off here.
    activation='gelu_tanh',  # MLP activation: 'gelu_tanh' (official), 'gelu' (exact), 'quick_gelu'.
    layer_norm_eps=1e-6,  # LayerNorm epsilon (timm's CLIP towers: 1e-5).
    layer_scale=0.,  # LayerScale init value (DeiT-III 1e-6, DINOv2 1e-5); 0 = no LayerScale.
    num_registers=0,  # Register tokens after the class token (DINOv2 reg4: 4).
    no_embed_class=False,  # Position table for the patch grid only (DeiT-III, DINOv2 reg).
    distilled=False,  # DeiT distillation token + head_dist; output = mean of both heads.
    norm_pre=False,  # LayerNorm before the first block (CLIP).
    fc_norm=False,  # LayerNorm after pooling instead of before (MAE-style pooled models).
    patch_bias=True,  # Bias of the patch embedding (CLIP has none).
)


def shrink(model: ml_collections.ConfigDict) -> None:
  model.hidden_size = 16
  model.transformer.update(dict(num_layers=1, num_heads=2, mlp_dim=16))
  if model.representation_size is not None:
    model.representation_size = 16


FAMILY = Family('vit', 'ViT', EXTRAS, True,
                token_stride=patch_size, token_grid=patch_grid,
                finetune_resolution=rounded_up(patch_size), input_multiple=patch_size,
                shrink=shrink,
                module='vit_jax.families.vit.model.VisionTransformer',
                shape_reader='vit_jax.families.vit.shapes.READER',
                flops='vit_jax.families.vit.flops.COUNTER', augreg=True, masked_pretraining=True,
                timm_vit=True, presets=PRESETS, weights=WEIGHTS)
