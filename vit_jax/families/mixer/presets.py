"""The MLP-Mixer presets (the published B/16, B/32, L/16)."""

import ml_collections

from vit_jax.families.record import published


def mixer(name: str, patch: int, hidden: int, blocks: int, tokens_mlp: int,
          channels_mlp: int) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      model_name=name, family='mixer',
      patches=ml_collections.ConfigDict({'size': (patch, patch)}), hidden_dim=hidden,
      num_blocks=blocks, tokens_mlp_dim=tokens_mlp, channels_mlp_dim=channels_mlp))


PRESETS = (
    mixer('Mixer-B_16', 16, 768, 12, 384, 3072),
    mixer('Mixer-B_32', 32, 768, 12, 384, 3072),
    mixer('Mixer-L_16', 16, 1024, 24, 512, 4096),
)
WEIGHTS = (
    published('mixer-imagenet21k', 'gs://mixer_models/imagenet21k', 'ImageNet-21k', 224, 21843,
              [('Mixer-B_16', 'Mixer-B_16'), ('Mixer-L_16', 'Mixer-L_16')])
    + published('mixer-imagenet1k', 'gs://mixer_models/imagenet1k', 'ImageNet', 224, 1000,
                [('Mixer-B_16', 'Mixer-B_16'), ('Mixer-L_16', 'Mixer-L_16')]))
