"""The ResNet (the hybrids' root, and the ResNet classifier), under its official module name.

The model lives with the rest of its family in `vit_jax/families/resnet/` (docs/architecture.md,
"Model families"); this name keeps `from vit_jax import models_resnet` working as officially.
"""

from vit_jax.families.resnet.model import *  # noqa: F401,F403  # The official names.
