"""What the training loop (vit_jax/train.py) is built from: optimizer, mesh, distillation."""
