"""What the tools and training read: PyTorch pickles refused, EXIF orientation, 8/16-bit images,
class names in a timm export."""

import json
import os
import pickle

import pytest

from vit_jax import checkpoint
from vit_jax import config_lib
from vit_jax.checkpoints import store
from vit_jax.tools import cli
from vit_jax.tools import predict


class _Planted:
  """Unpickling this creates `marker`: proof that a file was unpickled."""

  def __init__(self, marker):
    self.marker = marker

  def __reduce__(self):
    return (os.mkdir, (self.marker,))


def _planted_pickle(path, marker):
  with open(path, 'wb') as f:
    pickle.dump({'head.weight': _Planted(str(marker))}, f)
  return str(path)


@pytest.mark.parametrize('layout', ['hub_folder', 'bin_file', 'pth_file', 'pth_in_run_folder'])
def test_a_pytorch_pickle_is_one_line_saying_how_to_convert_and_never_unpickled(
    layout, tmp_path, capsys):
  folder = tmp_path / 'hub'
  folder.mkdir()
  (folder / 'config.json').write_text(json.dumps({'architecture': 'vit_base_patch16_224'}))
  marker = tmp_path / 'unpickled'
  name = 'pytorch_model.bin' if layout in ('hub_folder', 'bin_file') else 'swin_tiny.pth'
  weights = _planted_pickle(folder / name, marker)
  source = str(folder) if layout in ('hub_folder', 'pth_in_run_folder') else weights
  image = tmp_path / 'x.png'
  image.write_bytes(b'')
  assert cli.call(predict, ['predict', f'--checkpoint={source}', str(image)]) == 1
  err = capsys.readouterr().err
  assert err.startswith(f'predict: error: {weights} is a PyTorch pickle: only safetensors'), err
  assert 'save_file(torch.load(' in err and err.count('\n') == 1, err
  config = config_lib.get_config()
  config.pretrained_path = source  # Fine-tuning from it: the same line, before any training.
  with pytest.raises(checkpoint.CheckpointError, match='only safetensors weights are read'):
    store.pretrained_path(config)
  assert not marker.exists()
