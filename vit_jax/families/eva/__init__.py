"""The EVA family (timm's `eva` module: EVA, EVA-02, DINOv3, Perception Encoder, RoPE ViTs): its
record here (extra fields, patch-grid geometry, runlocal size; no jax), and beside it
`presets.py`, `model.py` (`Eva`, a ViT with rotary embeddings, SwiGLU, q/k norms and EVA's
biases), `shapes.py` (`READER`), `timm.py` (timm's eva names both ways, from the generated
architecture table) and `flops.py` (`COUNTER`).
"""

import ml_collections

from vit_jax.families.eva.presets import PRESETS
from vit_jax.families.record import Family, patch_grid, patch_size, rounded_up

# `Eva`'s fields beyond the official ViT's, at the model's defaults, and the training ones.
EXTRAS = dict(
    stochastic_depth=0.1,  # Drop-path rate of the last block (timm's fine-tuning: 0.1-0.2).
    dtype='float32',  # Compute dtype; 'bfloat16' for accelerators (params stay float32).
    remat=False,  # Recompute each block in backward: less activation memory.
    attention_impl='xla',  # 'heads_first' (fastest on CPU) or 'fused' (cuDNN flash on GPU).
    head_bias_init=0.,
    posemb='learn',  # The absolute table: 'learn' or 'none'.
    activation='gelu',  # The plain MLP's (timm's exact GELU).
    layer_norm_eps=1e-6,
    layer_scale=0.,
    num_registers=0,
    no_embed_class=False,
    distilled=False,
    norm_pre=False,
    fc_norm=False,
    patch_bias=True,
    rope='none',  # 'axial', 'mixed', 'centered' (DINOv3) or 'none'.
    rope_temperature=10_000.,
    rope_offset=0.,
    rope_reference=None,  # EVA's ref_feat_shape: the grid the coordinates span.
    rope_xy=False,
    rope_half=False,
    qkv_bias='qkv',  # 'qkv', 'qv' (EVA: no key bias) or 'none'.
    qk_norm=False,
    attention_norm=False,
    mlp='mlp',  # 'mlp' or 'swiglu'.
    mlp_norm=False,
    final_norm=True,
    map_heads=None,
    map_mlp_dim=None,
)


def shrink(model: ml_collections.ConfigDict) -> None:
  model.hidden_size = 16
  model.transformer.update(dict(num_layers=1, num_heads=2, mlp_dim=16))
  model.map_heads = None if model.get('map_heads') is None else 2
  model.map_mlp_dim = None if model.get('map_mlp_dim') is None else 16


FAMILY = Family('eva', 'EVA', EXTRAS, True, token_stride=patch_size, token_grid=patch_grid,
                finetune_resolution=rounded_up(patch_size), input_multiple=patch_size,
                shrink=shrink, module='vit_jax.families.eva.model.Eva',
                shape_reader='vit_jax.families.eva.shapes.READER',
                flops='vit_jax.families.eva.flops.COUNTER', presets=PRESETS,
                timm_writer='vit_jax.families.eva.timm')
