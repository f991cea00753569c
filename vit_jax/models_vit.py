"""The Vision Transformer (and the hybrid ResNet+ViT), under its official module name.

The model lives with the rest of its family in `vit_jax/families/vit/` (docs/architecture.md,
"Model families"); this name keeps `from vit_jax import models_vit` working as officially.
"""

from vit_jax.families.vit.model import *  # noqa: F401,F403  # The official names.
