"""Where `load_model` and `load_images` lived before the package had layers (`vit_jax.features`).

Code written against it keeps running; new code imports from the layer that owns each job:
`vit_jax.weights.loading.load_model`, `vit_jax.data.image_ops.load_images` and
`vit_jax.tools.features.extract_features` (docs/architecture.md).
"""

from vit_jax.weights.loading import LoadedModel, load_model  # noqa: F401
from vit_jax.data.image_ops import load_images, preprocess, read_image  # noqa: F401
from vit_jax.tools.features import Features, extract_features, make_feature_fn  # noqa: F401
