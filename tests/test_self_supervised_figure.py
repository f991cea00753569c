"""research/self_supervised/figure.py: MAE's masked inputs, reconstructions and originals."""

import json

import jax
import numpy as np
import pytest
from PIL import Image

from research.self_supervised import figure
from test_self_supervised import ssl_config
from vit_jax import train
from vit_jax.training import mae


@pytest.mark.parametrize('norm_pix_loss', [True, False])
def test_exact_predictions_reconstruct_the_original(norm_pix_loss, np_rng):
  images = np_rng.normal(size=(3, 8, 12, 3)).astype(np.float32)  # A 2x3 grid of 4px patches.
  keep = np.asarray(mae.visible_patches(jax.random.key(0), 3, 6, 0.5))
  targets = np.asarray(mae.pixel_targets(mae.patchify(images, 4), norm_pix_loss))
  masked_input, reconstruction = figure.compose(images, targets, keep, patch=4,
                                                norm_pix_loss=norm_pix_loss)
  np.testing.assert_allclose(reconstruction, images, atol=1e-4)
  hidden = np.asarray(mae.masked_positions(keep, 6)).reshape(3, 2, 3).repeat(4, 1).repeat(4, 2)
  grey = images.min() + figure.HIDDEN_GREY * (images.max() - images.min())
  np.testing.assert_array_equal(masked_input[hidden == 0], images[hidden == 0])
  np.testing.assert_allclose(masked_input[hidden == 1], grey)


def test_wrong_predictions_show_in_the_hidden_patches_only(np_rng):
  images = np_rng.normal(size=(2, 8, 8, 3)).astype(np.float32)
  keep = np.asarray(mae.visible_patches(jax.random.key(1), 2, 4, 0.75))
  _, reconstruction = figure.compose(images, np.zeros((2, 4, 48), np.float32), keep, patch=4,
                                     norm_pix_loss=False)
  hidden = np.asarray(mae.masked_positions(keep, 4)).reshape(2, 2, 2).repeat(4, 1).repeat(4, 2)
  np.testing.assert_array_equal(reconstruction[hidden == 1], 0.)
  np.testing.assert_array_equal(reconstruction[hidden == 0], images[hidden == 0])


def test_picture_of_a_tiny_mae_run(tmp_path, mock_cifar10):
  workdir = str(tmp_path / 'mae')
  train.train_and_evaluate(ssl_config('mae', total_steps=2), workdir)
  config, params, step = figure.load_run(workdir)
  assert step == 2 and {'encoder', 'decoder_pred'} <= set(params)
  images = figure.test_images(config, 3, 'test')
  masked_input, reconstruction = figure.reconstruct(config, params, images, seed=0)
  assert masked_input.shape == reconstruction.shape == images.shape == (3, 64, 64, 3)
  out = str(tmp_path / 'picture.png')
  figure.draw((masked_input, reconstruction, images), config, 'tiny', out)
  assert Image.open(out).size == (360, 390)  # 1.2 x 1.3 inches per image and row at 100 dpi.


def test_a_run_without_decoder_is_one_line(tmp_path):
  (tmp_path / 'run.json').write_text(json.dumps({'config': ssl_config('mpp').to_dict()}))
  with pytest.raises(ValueError, match="trainer='mpp'; the picture needs an MAE run"):
    figure.load_run(str(tmp_path))
