"""Checkpoint formats and surgery (vit_jax/checkpoint.py is the entry): npz, timm, run exports."""
