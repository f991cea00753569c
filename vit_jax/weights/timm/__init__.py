"""timm's hub weights, both ways: `files` (finding and reading a hub folder, `.safetensors` or
`hf-hub:` name), `convert` (a timm state dict → this package's tree, by the converter of the
family that claims it: `families/vit/timm.py`, `families/swin/timm.py`), `declared` (what a
config.json declares, checked against the weights), `architectures` (timm's own ViT table, as
data) and `export` (a trained ViT → a hub folder timm loads).
"""
