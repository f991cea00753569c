"""EVA-family presets: timm's eva architectures under their timm names (each field as timm's
definition gives it; tests/test_eva.py checks them against the generated table) and a small one
for tests and CPU runs. No jax: configs read these."""

from typing import Any

import ml_collections


def eva(name: str, patch: int, width: int, depth: int, heads: int, mlp_dim: int,
        **fields: Any) -> ml_collections.ConfigDict:
  """An EVA-family model config: the ViT's fields plus `Eva`'s (families/eva/model.py)."""
  config = ml_collections.ConfigDict(dict(
      model_name=name, family='eva', patches=ml_collections.ConfigDict({'size': (patch, patch)}),
      hidden_size=width, transformer=ml_collections.ConfigDict(dict(
          num_layers=depth, mlp_dim=mlp_dim, num_heads=heads, dropout_rate=0.,
          attention_dropout_rate=0.)),
      classifier='token', representation_size=None))
  config.update(fields)
  return config


# EVA-02 (Fang et al. 2023): axial RoPE on the 16x16 pretraining grid, SwiGLU, q/v biases.
_EVA02 = dict(classifier='token_gap', fc_norm=True, rope='axial', rope_temperature=10_000.,
              rope_reference=(16, 16), qkv_bias='qv', mlp='swiglu', layer_norm_eps=1e-6)
# DINOv3 (Siméoni et al. 2025): RoPE on centred coordinates, four registers, LayerScale.
_DINOV3 = dict(classifier='token_gap', posemb='none', rope='centered', rope_temperature=100.,
               rope_half=True, qkv_bias='none', num_registers=4, layer_scale=1e-5,
               layer_norm_eps=1e-5)
# Not the RoPE ViTs (Heo et al. 2024): their trees are a ViT's (q/k/v biases, a plain MLP), so a
# bare file of one could not be told from a ViT's; their hub folders load by config.json.

PRESETS = (
    eva('eva02_tiny_patch14_224', 14, 192, 12, 3, 512, **_EVA02),
    eva('eva02_small_patch14_224', 14, 384, 12, 6, 1024, **_EVA02),
    eva('eva02_base_patch14_224', 14, 768, 12, 12, 2048, mlp_norm=True,
        **dict(_EVA02, qkv_bias='qv')),
    eva('vit_small_patch16_dinov3', 16, 384, 12, 6, 1536, **_DINOV3),
    eva('vit_base_patch16_dinov3', 16, 768, 12, 12, 3072, **_DINOV3),
    # Tests and CPU runs: a 32px image in 4x4 patches, EVA-02's parts at width 32.
    eva('EVA-testing', 4, 32, 2, 2, 64, **dict(_EVA02, rope_reference=None, mlp_norm=True)),
)
