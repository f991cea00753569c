"""`python -m vit_jax.features`: runs vit_jax/tools/features.py (its flags, its help).

Also where `load_model` and `load_images` lived before the package had layers: code written
against `vit_jax.features` keeps running; new code imports from the layer that owns each job:
`vit_jax.weights.loading.load_model`, `vit_jax.data.image_ops.load_images` and
`vit_jax.tools.features.extract_features` (docs/architecture.md).
"""

from absl import flags

from vit_jax.weights.loading import LoadedModel, load_model  # noqa: F401
from vit_jax.data.image_ops import load_images, preprocess, read_image  # noqa: F401
from vit_jax.tools import cli
from vit_jax.tools import features as _tool
from vit_jax.tools.features import Features, extract_features, make_feature_fn  # noqa: F401

flags.adopt_module_key_flags(_tool)  # `--help` lists the tool's flags.

if __name__ == '__main__':
  __doc__ = _tool.__doc__  # absl's `--help` prints the main module's docstring.
  cli.run(_tool)
