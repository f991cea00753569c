"""Image-folder datasets: TFDS split strings, split-folder aliases, held-out slice, index stream."""

import io
import os
from unittest import mock

import jax
import numpy as np
import pytest
from PIL import Image
import tensorflow as tf

from vit_jax import config_lib
from vit_jax import input_pipeline
from vit_jax.training import settings
from vit_jax.data import folder_source
from vit_jax.data import image_ops
from vit_jax.data import image_check
from vit_jax.data import image_files

CLASSES = ('cat', 'dog', 'fox')


def write_folder(root, splits=('train', 'test'), per_class=(50, 30, 20), eval_per_class=4):
  """Tiny PNGs (train) and JPEGs (eval splits); pixel values differ per file."""
  rng = np.random.default_rng(0)
  for split in splits:
    for c, name in enumerate(CLASSES):
      os.makedirs(os.path.join(root, split, name))
      for i in range(per_class[c] if split == 'train' else eval_per_class):
        image = Image.fromarray(rng.integers(0, 256, (6, 5, 3), dtype=np.uint8))
        extension = 'png' if split == 'train' else 'jpg'
        image.save(os.path.join(root, split, name, f'{i:03d}.{extension}'))
  return str(root)


def make_config(root, train='train', test='test', **overrides):
  config = config_lib.get_config()
  config.update(dict(dataset=root, batch=4, batch_eval=8, shuffle_buffer=100, prefetch=1,
                     pp=dict(train=train, test=test, crop=8)))
  config.update(overrides)
  return config


def files(root, spec):
  paths, _ = folder_source.folder_split(root, CLASSES, spec)
  return list(paths)


def test_percent_slices_partition_the_folder_and_keep_classes_balanced(tmp_path):
  root = write_folder(tmp_path)
  head, tail, whole = files(root, 'train[:98%]'), files(root, 'train[98%:]'), files(root, 'train')
  assert head + tail == whole and len(whole) == 100 and len(tail) == 2
  assert sorted(whole) == sorted(
      os.path.join(root, 'train', c, f) for c in CLASSES
      for f in os.listdir(os.path.join(root, 'train', c)))
  tenth = [p.split(os.sep)[-2] for p in files(root, 'train[:10%]')]
  assert [tenth.count(c) for c in CLASSES] == [5, 3, 2]  # 50:30:20 in proportion.
  assert len(files(root, 'train[:7]')) == 7 and files(root, 'train[:7]') == whole[:7]
  with pytest.raises(ValueError, match=r"Cannot read split 'train\[:1000\]'.*config.pp.train"):
    files(root, 'train[:1000]')


@pytest.mark.parametrize('eval_folder', ['test', 'val', 'validation'])
def test_eval_split_names_are_aliases(tmp_path, eval_folder):
  root = write_folder(tmp_path, splits=('train', eval_folder))
  expected = files(root, eval_folder)
  assert all(f'{os.sep}{eval_folder}{os.sep}' in p for p in expected) and len(expected) == 12
  for name in ('test', 'validation', 'val'):
    assert files(root, name) == expected


def test_train_only_serves_eval_from_the_held_out_slice(tmp_path):
  root = write_folder(tmp_path, splits=('train',))
  held_out = files(root, 'test')
  assert held_out == files(root, 'validation') == files(root, folder_source.HELD_OUT_SPLIT)
  assert not set(held_out) & set(files(root, 'train[:98%]'))


def images_of(batches, masked=False):
  """The images of `batches` as bytes (only the real ones of masked eval batches)."""
  return [im.tobytes() for b in batches
          for im, keep in zip(b['image'], b['mask'] if masked else np.ones(len(b['image'])))
          if keep]


def test_folder_preset_on_train_only_never_trains_on_the_eval_images(tmp_path, caplog):
  """The README's `configs/vit.py:b16,/data/my_images` on a folder with train/ only."""
  root = write_folder(tmp_path, splits=('train',))  # 100 images: 98 train, 2 held out.
  config = make_config(root, **config_lib.FOLDER_PRESET['pp'])
  config.pp.train_aug = 'none'
  with caplog.at_level('INFO'):
    info = input_pipeline.get_dataset_info(settings.data(config))
  assert (info.num_train_examples, info.num_test_examples) == (98, 2)
  assert "evaluating on 'test' = train[98%:] of" in caplog.text and ': 2 examples' in caplog.text
  evaluated = images_of(input_pipeline.get_eval_data(settings.data(config)).batches(), masked=True)
  stream = input_pipeline.get_train_data(settings.data(config))
  trained = images_of(next(stream) for _ in range(2 * 98 // 4))  # Two epochs.
  assert len(evaluated) == 2 and len(set(trained)) == 98
  assert not set(evaluated) & set(trained)


@pytest.mark.parametrize('splits,train,test,shared', [
    (('train',), 'train[:100%]', 'test', 2),  # The held-out slice trained on.
    (('train',), 'train[:99%]', 'validation', 1),  # imagenet2012's preset on train/ only.
    (('train',), 'train', 'train[90%:]', 8),  # `train` is train[:98%] here.
    (('train', 'test'), 'train', 'train[:10]', 10),
    (('train', 'val'), 'train+validation', 'val', 12),
])
def test_overlapping_train_and_eval_splits_are_an_error(tmp_path, splits, train, test, shared):
  root = write_folder(tmp_path, splits=splits)
  with pytest.raises(ValueError) as error:
    input_pipeline.get_dataset_info(settings.data(make_config(root, train, test)))
  message = str(error.value)
  assert f'share {shared} of the' in message and repr(train) in message and repr(test) in message
  assert '--config.pp.train=' in message and len(message.splitlines()) == 1


@pytest.mark.parametrize('link', ['class_folder', 'file', 'hard_link'])
def test_a_test_image_that_is_a_training_image_under_another_path_is_an_error(tmp_path, link):
  """`test/cat -> ../train/cat` (or one image linked or hard-linked into both splits): the same
  files under other paths; the accuracy would be measured on training images (issue 62)."""
  root = write_folder(tmp_path)
  test_dir, train_file = os.path.join(root, 'test', CLASSES[0]), os.path.join(root, 'train',
                                                                              CLASSES[1], '000.png')
  if link == 'class_folder':
    for name in os.listdir(test_dir):
      os.remove(os.path.join(test_dir, name))
    os.rmdir(test_dir)
    os.symlink(os.path.join('..', 'train', CLASSES[0]), test_dir)
  else:
    (os.symlink if link == 'file' else os.link)(train_file, os.path.join(test_dir, 'copy.png'))
  shared = 50 if link == 'class_folder' else 1
  with pytest.raises(ValueError) as error:
    input_pipeline.get_dataset_info(settings.data(make_config(root)))
  message = str(error.value)
  assert f'share {shared} of the' in message and len(message.splitlines()) == 1, message


def test_a_validation_split_that_shares_training_images_is_an_error(tmp_path):
  root = write_folder(tmp_path)
  config = make_config(root, 'train[:50%]', 'test')
  config.pp.val = 'train[45%:55%]'
  with pytest.raises(ValueError) as error:
    input_pipeline.get_dataset_info(settings.data(config))
  message = str(error.value)
  assert 'share 5 examples' in message and '--config.pp.val=' in message
  assert len(message.splitlines()) == 1
  config.pp.val = 'train[90%:]'
  assert input_pipeline.get_dataset_info(settings.data(config)).num_train_examples == 50


@pytest.mark.parametrize('splits,train,test,sizes', [
    (('train',), 'train', 'test', (98, 2)),
    (('train',), 'train[:98%]', 'train[98%:]', (98, 2)),
    (('train',), 'train[:50%]', 'train[90%:]', (50, 10)),
    (('train', 'val'), 'train', 'test', (100, 12)),  # A val/ folder: all of train/ is trained.
    (('train', 'test'), 'train[:98%]', 'test', (98, 12)),
])
def test_disjoint_splits_are_accepted(tmp_path, splits, train, test, sizes):
  root = write_folder(tmp_path, splits=splits)
  info = input_pipeline.get_dataset_info(settings.data(make_config(root, train, test)))
  assert (info.num_train_examples, info.num_test_examples) == sizes
  assert not set(files(root, folder_source.without_held_out(root, train))) & set(
      files(root, test))


def test_a_train_folder_too_small_for_its_held_out_slice_is_a_one_line_error(tmp_path):
  root = write_folder(tmp_path, splits=('train',), per_class=(5, 3, 2))  # 2% of 10: nothing.
  with pytest.raises(ValueError) as error:
    input_pipeline.get_dataset_info(settings.data(make_config(root)))
  message = str(error.value)
  assert 'train[98%:] of' in message and 'has no examples' in message, message
  assert '--config.pp.test=train[80%:]' in message and len(message.splitlines()) == 1
  config = make_config(root, 'train[:80%]', 'train[80%:]')  # The fix the line names works.
  info = input_pipeline.get_dataset_info(settings.data(config))
  assert (info.num_train_examples, info.num_test_examples) == (8, 2)


def test_tfds_split_strings_mean_the_same_and_overlap_is_an_error():
  import tensorflow_datasets as tfds  # noqa: PLC0415
  config = make_config('cifar10', 'train', 'train[98%:]')
  with tfds.testing.mock_data(num_examples=100):
    with pytest.raises(ValueError, match=r"share 2 of the .*--config.pp.train=train\[:98%\]"):
      input_pipeline.get_dataset_info(settings.data(config))
    config.pp.train = 'train[:98%]'
    assert input_pipeline.get_dataset_info(settings.data(config)).num_classes == 10


@pytest.mark.parametrize('preset', ['cifar10', 'imagenet2012'])
@pytest.mark.parametrize('splits', [('train', 'test'), ('train', 'val'), ('train',)])
def test_preset_split_strings_work_on_folders(tmp_path, preset, splits):
  root = write_folder(tmp_path, splits=splits)
  pp = config_lib.DATASET_PRESETS[preset]['pp']
  config = make_config(root, pp['train'], pp['test'])
  if (preset, splits) == ('imagenet2012', ('train',)):  # train[:99%] overlaps train[98%:].
    with pytest.raises(ValueError, match='share 1 of the 2 eval examples'):
      input_pipeline.get_dataset_info(settings.data(config))
    return
  info = input_pipeline.get_dataset_info(settings.data(config))
  assert info.class_names == CLASSES
  held_out = 2 if splits == ('train',) else 12
  assert info.num_test_examples == held_out
  assert info.num_train_examples == {'cifar10': 98, 'imagenet2012': 99}[preset]
  batches = list(input_pipeline.get_eval_data(settings.data(config)).batches())
  assert sum(b['mask'].sum() for b in batches) == held_out
  assert next(input_pipeline.get_train_data(settings.data(config)))['image'].shape == (4, 8, 8, 3)


def labels_of(batches):
  return np.concatenate([b['label'].argmax(-1) for b in batches])


def test_index_stream_is_an_epoch_permutation_and_resumes_anywhere(tmp_path):
  root = write_folder(tmp_path, per_class=(6, 5, 5))  # 16 files: 4 batches an epoch.
  config = make_config(root, pp=dict(train='train', test='test', crop=8, train_aug='none'))
  stream = [next(it) for it in [input_pipeline.get_train_data(settings.data(config))]
            for _ in range(8)]
  epoch = labels_of(stream[:4])
  assert np.bincount(epoch).tolist() == [6, 5, 5]  # Every file once per epoch...
  assert not np.array_equal(epoch, labels_of(stream[4:]))  # ...in a new order each epoch.
  images = [b['image'] for b in stream[:4]]
  assert len({im.tobytes() for b in images for im in b}) == 16
  config.data_autotune = False  # Fixed parallelism, no tuning thread: the same batches.
  resumed = input_pipeline.get_train_data(settings.data(config), start_batch=6)
  for expected in stream[6:]:
    got = next(resumed)
    np.testing.assert_array_equal(got['image'], expected['image'])
    np.testing.assert_array_equal(got['label'], expected['label'])


def test_stream_sharding_does_not_depend_on_the_process_count(tmp_path):
  root = write_folder(tmp_path, per_class=(6, 5, 5))
  config = make_config(root, data_sharding='stream')
  whole = [next(it) for it in [input_pipeline.get_train_data(settings.data(config), start_batch=3)]
           for _ in range(3)]
  parts = []
  for index in range(2):
    with mock.patch.object(jax, 'process_count', return_value=2), \
         mock.patch.object(jax, 'process_index', return_value=index):
      it = input_pipeline.get_train_data(settings.data(config), start_batch=3)
      parts.append([next(it) for _ in range(3)])
  for step, expected in enumerate(whole):
    for key in ('image', 'label'):
      np.testing.assert_array_equal(
          np.concatenate([parts[0][step][key], parts[1][step][key]]), expected[key])


def test_unreadable_train_file_is_replaced_and_the_stream_stays_resumable(tmp_path, caplog):
  root = write_folder(tmp_path, per_class=(6, 5, 5))
  for name in ('002.png', '003.png'):  # A truncated PNG and an empty file.
    path = os.path.join(root, 'train', 'cat', name)
    data = open(path, 'rb').read()
    with open(path, 'wb') as f:
      f.write(data[:len(data) // 2] if name == '002.png' else b'')
  config = make_config(root)
  with caplog.at_level('WARNING'):
    stream = [next(it) for it in [input_pipeline.get_train_data(settings.data(config))]
              for _ in range(6)]
  assert 'Skipped 2 unreadable image file(s)' in caplog.text
  resumed = input_pipeline.get_train_data(settings.data(config), start_batch=3)
  for expected in stream[3:]:
    np.testing.assert_array_equal(next(resumed)['image'], expected['image'])


def test_unreadable_eval_file_is_masked_out(tmp_path):
  root = write_folder(tmp_path)
  with open(os.path.join(root, 'test', 'dog', '001.jpg'), 'wb') as f:
    f.write(b'\xff\xd8\xff\xe0 cut short')
  eval_data = input_pipeline.get_eval_data(settings.data(make_config(root)))
  batches = list(eval_data.batches())
  assert eval_data.num_examples == 12 and sum(b['mask'].sum() for b in batches) == 11


def test_killed_run_on_a_folder_resumes_to_identical_params(tmp_path):
  """The kill-and-resume test of test_train on the index-addressed stream (a folder)."""
  import test_train  # noqa: PLC0415  # Its config and crash helper; a test module.
  from vit_jax import train  # noqa: PLC0415
  root = write_folder(tmp_path / 'data', per_class=(6, 5, 5))
  config = test_train.make_config(dataset=root, total_steps=6, checkpoint_every=2, eval_every=0)
  train.train_and_evaluate(config, str(tmp_path / 'straight'))
  workdir = str(tmp_path / 'killed')
  with test_train.crash_at(6), pytest.raises(KeyboardInterrupt):
    train.train_and_evaluate(config, workdir)
  assert train.train_and_evaluate(config, workdir)['step'] == 6  # Continues at step 4.
  test_train.assert_trees_close(test_train.final_params(workdir),
                                test_train.final_params(str(tmp_path / 'straight')), atol=0)


def encoded(fmt, seed, size=(6, 5)):
  image = np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)
  buffer = io.BytesIO()
  Image.fromarray(image).save(buffer, fmt)
  return buffer.getvalue()


def with_thumbnail(jpeg):
  """`jpeg` with an EXIF-like APP1 segment holding a whole JPEG (a thumbnail: its own SOS, EOI)."""
  thumbnail = encoded('JPEG', 99, (8, 8))
  return (jpeg[:2] + b'\xff\xe1' + (len(thumbnail) + 8).to_bytes(2, 'big') + b'Exif\x00\x00'
          + thumbnail + jpeg[2:])


# What phones and cameras write, which TF decodes: data after a JPEG's end, padding after a PNG's.
WHOLE = {
    'trailer.jpg': lambda s: encoded('JPEG', s) + b'\xff\xe1MakerNote' + bytes(range(57)),  # 68 B.
    'thumbnail.jpg': lambda s: with_thumbnail(encoded('JPEG', s)) + b'\xff\xd8' + bytes(66),
    'padded.png': lambda s: encoded('PNG', s) + bytes(8),
}
# Truly cut files (TF cannot decode them either).
TRUNCATED = {
    'cut.jpg': lambda s: with_thumbnail(encoded('JPEG', s, (40, 30)))[:-200],
    'no_iend.png': lambda s: encoded('PNG', s)[:-12],
}


def write_files(root, split, makers, per_class, clean=False):
  for c, name in enumerate(CLASSES):
    os.makedirs(os.path.join(root, split, name), exist_ok=True)
    for i in range(per_class):
      for file_name, make in makers.items():
        data = make(1000 * c + i)
        if clean:  # The same image without the extra bytes.
          data = encoded(file_name[-3:].replace('jpg', 'JPEG').upper(), 1000 * c + i)
        with open(os.path.join(root, split, name, f'{i:02d}_{file_name}'), 'wb') as f:
          f.write(data)
  return str(root)


def test_files_with_trailers_or_padding_are_read_and_truncated_ones_are_not():
  for make in WHOLE.values():
    tf.io.decode_image(make(0))  # TF reads them...
  for make in TRUNCATED.values():
    with pytest.raises(tf.errors.InvalidArgumentError):
      tf.io.decode_image(make(0))
  check = tf.function(image_check.readable)
  for name, make in {**WHOLE, **TRUNCATED}.items():
    assert bool(check(tf.constant(make(0)), tf.constant(name))) == (name in WHOLE), name


# Web images saved as .jpg are often WebP (or BMP): TF decodes them by content.
OTHER_WHOLE = {
    'webp.jpg': lambda s: encoded('WEBP', s),
    'webp_trailer.jpg': lambda s: encoded('WEBP', s) + bytes(9),
    'bmp.jpg': lambda s: encoded('BMP', s),
}
OTHER_TRUNCATED = {
    'webp_cut.jpg': lambda s: encoded('WEBP', s, (40, 30))[:-2],
    'bmp_cut.jpg': lambda s: encoded('BMP', s)[:-2],
    'bmp_trailer.jpg': lambda s: encoded('BMP', s) + bytes(9),  # TF refuses it: size mismatch.
    'empty.jpg': lambda s: b'',
}


def test_webp_and_bmp_content_is_read_and_truncated_ones_are_not():
  check = tf.function(image_check.readable)
  for name, make in {**OTHER_WHOLE, **OTHER_TRUNCATED}.items():
    data = make(0)
    try:
      tf.io.decode_image(data)
      decodes = True
    except tf.errors.InvalidArgumentError:
      decodes = False
    assert decodes == (name in OTHER_WHOLE), name  # The check agrees with the decoder...
    assert bool(check(tf.constant(data), tf.constant(name))) == decodes, name  # ...on each.


def test_training_reads_files_with_trailers_as_the_clean_files(tmp_path, caplog):
  with_extras = write_files(tmp_path / 'extras', 'train', WHOLE, 4)
  clean = write_files(tmp_path / 'clean', 'train', WHOLE, 4, clean=True)
  streams = []
  for root in (with_extras, clean):
    config = make_config(root, 'train[:100%]', 'train[:0]', pp=dict(train_aug='none'))
    with caplog.at_level('WARNING'):
      streams.append([next(it) for it in [input_pipeline.get_train_data(settings.data(config))]
                      for _ in range(9)])
  assert 'unreadable' not in caplog.text  # No file replaced...
  for got, expected in zip(*streams):  # ...so the stream is the clean folder's, image by image.
    np.testing.assert_array_equal(got['image'], expected['image'])
    np.testing.assert_array_equal(got['label'], expected['label'])


def test_eval_counts_files_with_trailers_and_masks_only_truncated_ones(tmp_path):
  """Exact accuracy over all images: a train + eval run counts every readable eval file."""
  import test_train  # noqa: PLC0415
  from vit_jax import train  # noqa: PLC0415
  root = write_files(tmp_path / 'data', 'train', WHOLE, 3)
  write_files(tmp_path / 'data', 'test', {**WHOLE, **TRUNCATED}, 2)
  config = test_train.make_config(dataset=root, total_steps=2, eval_every=0)
  result = train.train_and_evaluate(config, str(tmp_path / 'run'))
  assert result['num_examples'] == len(CLASSES) * 2 * len(WHOLE)  # 18 of the 30 files.
  batches = list(input_pipeline.get_eval_data(settings.data(make_config(root))).batches())
  assert sum(b['mask'].sum() for b in batches) == 18


def _png(path, seed=0):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  pixels = np.random.default_rng(seed).integers(0, 256, (6, 5, 3), dtype=np.uint8)
  Image.fromarray(pixels).save(path)


def write_jupyter_folder(root):
  """cat/dog with a nested sub-folder, plus what Jupyter and macOS leave behind."""
  for i, rel in enumerate(['train/cat/a.png', 'train/cat/2024/b.png', 'train/cat/2024/x/c.png',
                           'train/dog/a.png', 'train/dog/b.png', 'test/cat/deep/a.png',
                           'test/dog/a.png',
                           # Hidden: never a class, never an image.
                           'train/.ipynb_checkpoints/a-checkpoint.png',
                           'train/cat/.ipynb_checkpoints/a-checkpoint.png',
                           'train/dog/.hidden.png', 'test/.ipynb_checkpoints/a.png']):
    _png(os.path.join(root, rel), seed=i)
  return str(root)


def test_hidden_files_are_skipped_and_nested_images_belong_to_their_class(tmp_path):
  root = write_jupyter_folder(tmp_path)
  config = make_config(root)
  info = input_pipeline.get_dataset_info(settings.data(config))
  assert info.class_names == ('cat', 'dog')
  assert (info.num_train_examples, info.num_test_examples) == (5, 2)
  listed = sorted(os.path.relpath(p, root) for p in files(root, 'train'))
  assert listed == sorted(['train/cat/a.png', 'train/cat/2024/b.png', 'train/cat/2024/x/c.png',
                           'train/dog/a.png', 'train/dog/b.png'])
  paths, labels = folder_source.folder_split(root, ('cat', 'dog'), 'test')
  assert dict(zip((os.path.relpath(p, root) for p in paths), labels)) == {
      'test/cat/deep/a.png': 0, 'test/dog/a.png': 1}
  evaluated = images_of(input_pipeline.get_eval_data(settings.data(config)).batches(), masked=True)
  assert len(evaluated) == 2


def test_predict_on_a_folder_skips_hidden_files_and_reads_sub_folders(tmp_path):
  root = write_jupyter_folder(tmp_path)
  found = [os.path.relpath(p, root) for p in image_files.list_images([os.path.join(root, 'train')])]
  assert found == ['train/cat/2024/b.png', 'train/cat/2024/x/c.png', 'train/cat/a.png',
                   'train/dog/a.png', 'train/dog/b.png']


@pytest.mark.parametrize('split', ['train', 'test'])
def test_an_empty_class_folder_is_one_line_naming_it(tmp_path, split):
  root = write_jupyter_folder(tmp_path)
  os.makedirs(os.path.join(root, split, 'eel', '.ipynb_checkpoints'))  # Only hidden inside.
  if split == 'test':
    os.makedirs(os.path.join(root, 'train', 'eel'))
    _png(os.path.join(root, 'train', 'eel', 'a.png'))
  with pytest.raises(ValueError) as error:
    input_pipeline.get_dataset_info(settings.data(make_config(root)))
  message = str(error.value)
  assert f'Empty class folder {os.path.join(root, split, "eel")}' in message
  assert 'delete the folder' in message and '\n' not in message


# Every format in the one list (image_files.IMAGE_EXTENSIONS): TF decodes the first five, Pillow
# TIFF; training, evaluation and predict read each file alike.
FORMATS = {'jpg': 'JPEG', 'jpeg': 'JPEG', 'png': 'PNG', 'gif': 'GIF', 'bmp': 'BMP',
           'webp': 'WEBP', 'tif': 'TIFF', 'TIFF': 'TIFF'}


def test_every_image_format_is_trained_on_and_evaluated_as_predict_reads_it(tmp_path, caplog):
  root = str(tmp_path)
  for split in ('train', 'test'):
    for c, name in enumerate(CLASSES[:2]):
      os.makedirs(os.path.join(root, split, name))
      for i, (extension, fmt) in enumerate(FORMATS.items()):
        with open(os.path.join(root, split, name, f'{i}.{extension}'), 'wb') as f:
          f.write(encoded(fmt, 100 * c + i, (9, 7)))
  (tmp_path / 'train' / 'cat' / 'notes.txt').write_text('not an image')
  config = make_config(root, pp=dict(train_aug='none'))
  assert set(image_files.IMAGE_EXTENSIONS) == {f'.{e.lower()}' for e in FORMATS}
  with caplog.at_level('WARNING'):
    info = input_pipeline.get_dataset_info(settings.data(config))
  assert (info.num_train_examples, info.num_test_examples) == (16, 16)
  [line] = [r.getMessage() for r in caplog.records if 'Skipped' in r.getMessage()]
  assert 'Skipped 1 file' in line and os.path.join(root, 'train', 'cat', 'notes.txt') in line
  paths, labels = folder_source.folder_split(root, CLASSES[:2], 'test')
  batches = list(input_pipeline.get_eval_data(settings.data(config)).batches())
  assert sum(b['mask'].sum() for b in batches) == 16
  np.testing.assert_array_equal(np.concatenate([b['image'] for b in batches])[:16],
                                image_ops.load_images(list(paths), 8))
  train_paths, _ = folder_source.folder_split(root, CLASSES[:2], 'train')
  want = {im.tobytes() for im in image_ops.load_images(list(train_paths), 8)}
  stream = input_pipeline.get_train_data(settings.data(config))
  assert {im.tobytes() for _ in range(4) for im in next(stream)['image']} == want  # An epoch.
  assert 'unreadable' not in caplog.text


def corrupt_png(seed):
  """A PNG whose structure is whole (signature ... IEND) but whose pixel data is garbage."""
  data = bytearray(encoded('PNG', seed, (20, 20)))
  start = data.index(b'IDAT') + 4
  data[start:start + 32] = bytes(b ^ 0x5A for b in data[start:start + 32])
  return bytes(data)


@pytest.mark.parametrize('split', ['train', 'test'])
def test_a_corrupt_image_stops_the_run_with_one_line_naming_it(tmp_path, split):
  root = write_folder(tmp_path, per_class=(6, 5, 5))
  bad = os.path.join(root, split, 'dog', 'bad.png')
  with open(bad, 'wb') as f:
    f.write(corrupt_png(0))
  config = make_config(root)
  with pytest.raises(ValueError) as error:
    if split == 'train':
      stream = input_pipeline.get_train_data(settings.data(config))
      for _ in range(8):  # Two epochs: the bad file is met.
        next(stream)
    else:
      list(input_pipeline.get_eval_data(settings.data(config)).batches())
  message = str(error.value)
  assert bad in message and 'delete or replace it' in message and '\n' not in message, message


def test_a_symlink_back_into_the_dataset_is_not_followed(tmp_path, caplog):
  """`train/cat/up -> ..` would list every class again inside cat (and again, to the OS's
  link limit); a link out of the dataset (shared storage) is followed."""
  root = write_jupyter_folder(tmp_path / 'data')
  _png(str(tmp_path / 'pool' / 'p.png'))
  os.symlink('..', os.path.join(root, 'train', 'cat', 'up'))
  os.symlink(os.path.join(root, 'test', 'dog'), os.path.join(root, 'train', 'dog', 'more'))
  os.symlink(str(tmp_path / 'pool'), os.path.join(root, 'train', 'dog', 'pool'))
  with caplog.at_level('WARNING'):
    listed = sorted(os.path.relpath(p, root) for p in files(root, 'train'))
  assert listed == sorted(['train/cat/a.png', 'train/cat/2024/b.png', 'train/cat/2024/x/c.png',
                           'train/dog/a.png', 'train/dog/b.png', 'train/dog/pool/p.png'])
  [line] = [r.getMessage() for r in caplog.records if 'symlink' in r.getMessage()]
  assert 'not follow 2 symlinked folder' in line
  assert os.path.join(root, 'train', 'cat', 'up') in line
  found = image_files.list_images([os.path.join(root, 'train')])  # predict's tree: train/ only.
  assert (sorted(os.path.relpath(p, root) for p in found)
          == sorted(listed + ['train/dog/more/a.png']))
