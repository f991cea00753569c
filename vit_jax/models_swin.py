"""The Swin Transformer, under its official module name.

The model lives with the rest of its family in `vit_jax/families/swin/` (docs/architecture.md,
"Model families"); this name keeps `from vit_jax import models_swin` working as officially.
"""

from vit_jax.families.swin.model import *  # noqa: F401,F403  # The official names.
