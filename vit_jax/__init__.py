"""vit-jax: Vision Transformer, hybrid ResNet+ViT and MLP-Mixer models in JAX/Flax."""

__version__ = '0.1.0'
