"""Runs `python -m MODULE ARGS` with every TFDS dataset replaced by 16 random labelled JPEGs.

  python tests/mocked_run.py vit_jax.main --config=configs/vit_b16_cifar10.py:runlocal

For the documented-commands test: the command runs as printed, without network or real data.
Only the 'image' and 'label' features the input pipeline reads are made, so datasets whose
other features TFDS's own random mock cannot build (Oxford-IIIT Pets' boxes) work too.
"""

import runpy
import sys

import tensorflow as tf
import tensorflow_datasets as tfds

NUM_EXAMPLES = 16


def random_examples(builder, split, decoders=None, read_config=None, shuffle_files=False):
  """`builder.as_dataset` stand-in: encoded JPEGs (as with SkipDecoding) and class labels."""
  del split, decoders, read_config, shuffle_files
  num_classes = builder.info.features['label'].num_classes

  def example(index):
    pixels = tf.random.stateless_uniform([24, 32, 3], tf.stack([index, 0]), 0, 256, tf.int64)
    return {'image': tf.io.encode_jpeg(tf.cast(pixels, tf.uint8)),
            'label': index % num_classes}

  return tf.data.Dataset.range(NUM_EXAMPLES).map(example)


if __name__ == '__main__':
  module, sys.argv = sys.argv[1], [sys.argv[1]] + sys.argv[2:]
  with tfds.testing.mock_data(num_examples=NUM_EXAMPLES, as_dataset_fn=random_examples):
    runpy.run_module(module, run_name='__main__', alter_sys=True)
