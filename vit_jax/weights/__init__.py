"""Weights: their formats and surgery, under `vit_jax.checkpoint` (the official load/save API).

npz_format (the published file), store (names, download, cache), surgery (fit a tree to a
model), architecture (the model a file's shapes describe), metadata (what an export is),
loading (`load_model`), `timm/` (timm hub weights both ways; each family's own names in its
folder: `families/vit/timm.py`, `families/swin/timm.py`); the orbax resume of a run's saved
train states (`workdir/train_state`) lives in resume.
"""
