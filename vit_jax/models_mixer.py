"""MLP-Mixer, under its official module name.

The model lives with the rest of its family in `vit_jax/families/mixer/` (docs/architecture.md,
"Model families"); this name keeps `from vit_jax import models_mixer` working as officially.
"""

from vit_jax.families.mixer.model import *  # noqa: F401,F403  # The official names.
