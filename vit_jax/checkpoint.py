"""Published `.npz` checkpoints: load into the Linen tree, save, and load for fine-tuning.

The official module's API (`load`, `save`, `load_pretrained`), built from `vit_jax.checkpoints`:
`npz_format` (the file and its legacy names), `store` (published names, download and cache),
`surgery` (heads, position embeddings, the tree check), `metadata` (what an export is),
`architecture` (the model a file's shapes describe) and `loading.load_model` (a file into a
ready model). timm-format checkpoints (a hub folder, a `.safetensors` file, `hf-hub:timm/<name>`)
are read through `checkpoints.timm_format` behind the same calls.
"""

from typing import Any, Mapping, Optional, Sequence

from absl import logging

from vit_jax import presets
from vit_jax.checkpoints import architecture
from vit_jax.checkpoints import metadata as metadata_lib
from vit_jax.checkpoints import npz_format
from vit_jax.checkpoints import store
from vit_jax.checkpoints import surgery
from vit_jax.checkpoints import timm_files
from vit_jax.checkpoints import timm_format
from vit_jax.checkpoints.npz_format import CheckpointError, Params

__all__ = ['CheckpointError', 'load', 'load_pretrained', 'save']


def load(path: str, cache_dir: Optional[str] = None) -> Params:
  """Loads a published .npz (local path, gs:// or https://) or a timm-format checkpoint
  (see `timm_files.is_timm_source`) into the Linen param tree."""
  if timm_files.is_timm_source(path):
    return timm_format.load_as_checkpoint(path).params
  return npz_format.params_from_flat(npz_format.read_npz(store.resolve(path, cache_dir)))


def save(params: Mapping[str, Any], path: str,
         metadata: Optional[Mapping[str, Any]] = None) -> str:
  """Writes `params` as a published-layout .npz (atomic: temp file, then rename).

  Args:
    params: the Linen param tree.
    path: the .npz to write.
    metadata: a description (`metadata.describe_run`) embedded in the archive's comment, so
      that the file says what it is under any name; the arrays and their keys are unchanged.
  """
  comment = None if metadata is None else metadata_lib.zip_comment(metadata, path)
  return npz_format.write_npz(params, path, comment)


def load_pretrained(*, pretrained_path: str, init_params: Mapping[str, Any], model_config: Any,
                    grid_shape: Optional[Sequence[int]] = None,
                    cache_dir: Optional[str] = None, keep_head: bool = False) -> Params:
  """Adapts a pretrained checkpoint for fine-tuning (official semantics).

  The head comes from `init_params` (new task); `representation_size=None` drops `pre_logits`;
  position embeddings are fitted to the model's grid (`grid_shape`, or square). Anything else
  that does not fit raises one short error naming the first differing names.

  Args:
    pretrained_path: local .npz, run directory, gs:// or https:// path, or a published name
      (see `store.resolve_name`).
    init_params: freshly initialised params of the fine-tuning model.
    model_config: the model's ConfigDict/dict (classifier, representation_size).
    grid_shape: (rows, cols) token grid of the fine-tuning model; needed for non-square inputs.
    cache_dir: where remote files are cached (default: `checkpoints/`).
    keep_head: keep the checkpoint's head (same label set, e.g. fine-tuning at a higher
      resolution on the pretraining dataset); by default it is replaced, as officially.

  Returns:
    A param tree shaped like `init_params`.
  """
  path = store.resolve_name(pretrained_path)
  restored = load(path, cache_dir)
  if not timm_files.is_timm_source(path):
    _warn_if_described_otherwise(path, model_config)
  return surgery.fit_to_model(restored, init_params, model_config, pretrained_path,
                              grid_shape=grid_shape, keep_head=keep_head)


def _warn_if_described_otherwise(path: str, model_config: Any) -> None:
  """One warning when a file's description gives another posemb/classifier than the config.

  Neither has parameters of its own in every case (sincos2d vs none; token vs token_unpooled),
  so the shapes fit and fine-tuning would silently start from another model than was trained.
  """
  described = (metadata_lib.read_metadata(path) or {}).get('model') or {}
  if not described or presets.family_of(model_config) in ('mixer', 'resnet'):
    return
  # Fields a preset leaves out take the official defaults.
  config = architecture.full_vit_config(model_config)
  changed = [f'{key} {described[key]!r} in the file, {config[key]!r} in the config'
             for key in ('posemb', 'classifier')
             if key in described and described[key] != config[key]]
  if changed:
    logging.warning('load_pretrained: %s was trained with another model: %s; set '
                    '--config.model.<field> to the file\'s value to fine-tune the model it holds.',
                    path, '; '.join(changed))
