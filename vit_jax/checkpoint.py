"""Published `.npz` checkpoints: load into the Linen tree, save, and load for fine-tuning.

The official module's API (`load`, `save`, `load_pretrained`), built from `vit_jax.weights`:
`npz_format` (the file and its legacy names), `store` (published names, download and cache),
`surgery` (heads, position embeddings, the tree check), `metadata` (what an export is),
`architecture` (the model a file's shapes describe) and `loading` (a source opened once, then
fitted to a model). timm-format checkpoints (a hub folder, a `.safetensors` file,
`hf-hub:timm/<name>`) are read through `weights.timm.convert` behind the same calls. This is the
official API on top of `weights`: training's export and the tools may use it, nothing in
`weights` does.
"""

from typing import Any, Mapping, Optional, Sequence

from vit_jax.weights import loading
from vit_jax.weights import metadata as metadata_lib
from vit_jax.weights import npz_format
from vit_jax.weights import store
from vit_jax.weights.npz_format import CheckpointError, Params

__all__ = ['CheckpointError', 'load', 'load_pretrained', 'save']


def load(path: str, cache_dir: Optional[str] = None) -> Params:
  """Loads a published .npz (local path, gs:// or https://) or a timm-format checkpoint
  (see `store.locate`) into the Linen param tree (`loading.read_arrays`)."""
  return loading.read_arrays(store.locate(path), cache_dir)[0]


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
  that does not fit raises one short error naming the first differing names. The same as
  `loading.fit_source(loading.open_source(pretrained_path), ...)`, what training calls.

  Args:
    pretrained_path: local .npz, run directory, gs:// or https:// path, a published name
      (see `store.locate`) or a timm-format source.
    init_params: freshly initialised params of the fine-tuning model.
    model_config: the model's ConfigDict/dict (family, classifier, representation_size).
    grid_shape: (rows, cols) token grid of the fine-tuning model; needed for non-square inputs.
    cache_dir: where remote files are cached (default: `store.default_cache_dir()`).
    keep_head: keep the checkpoint's head (same label set, e.g. fine-tuning at a higher
      resolution on the pretraining dataset); by default it is replaced, as officially.

  Returns:
    A param tree shaped like `init_params`.
  """
  source = loading.open_source(pretrained_path, cache_dir=cache_dir)
  return loading.fit_source(source, init_params, model_config, grid_shape=grid_shape,
                            keep_head=keep_head)
