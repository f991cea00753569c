"""What the training loop (vit_jax/train.py) is built from: state, losses, optimizer, mesh,
progress, SIGTERM stop, export, the two-stage tie and distillation."""
