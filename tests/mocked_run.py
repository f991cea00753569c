"""Runs `python -m MODULE ARGS` with every TFDS dataset replaced by 16 random labelled JPEGs.

  python tests/mocked_run.py vit_jax.main --config=configs/vit_b16_cifar10.py:runlocal

For the documented-commands test: the command runs as printed, without network or real data.
Only the 'image' and 'label' features the input pipeline reads are made, so datasets whose
other features TFDS's own random mock cannot build (Oxford-IIIT Pets' boxes) work too.

  python tests/mocked_run.py --serve

runs the same commands, one JSON request per stdin line, each in a child forked from a process
that has already imported the heavy libraries (TensorFlow, TFDS, JAX, Flax, optax, orbax): one
start-up (~5 s of CPU) for the test process's commands instead of one per command. The child is
what `python tests/mocked_run.py MODULE ARGS` (or `python SCRIPT ARGS`) would be after those
imports: its own cwd, environment, argv, stdout and stderr files and exit status; nothing of
the package is imported before the command runs it, and no accelerator backend is started
before the fork (JAX starts one on first use, in the child).
"""

import json
import os
import runpy
import signal
import sys
import threading

if sys.argv[1:] == ['--serve']:
  # As tests/conftest.py: triton (torch's, for the commands that load timm) segfaults when its
  # C extension loads after TensorFlow's.
  try:
    import triton  # noqa: F401
  except ImportError:
    pass
import tensorflow as tf  # noqa: E402
import tensorflow_datasets as tfds  # noqa: E402

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


def run_mocked(module, args):
  """`python -m module args` with TFDS mocked (ends by SystemExit as the module's main does)."""
  sys.argv = [module, *args]
  with tfds.testing.mock_data(num_examples=NUM_EXAMPLES, as_dataset_fn=random_examples):
    runpy.run_module(module, run_name='__main__', alter_sys=True)


def _child(request):
  """In the forked child: become the requested command's process, then run it. Never returns
  (the command's SystemExit or exception ends the interpreter as it would end `python`)."""
  os.chdir(request['cwd'])
  os.environ.clear()
  os.environ.update(request['env'])
  for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                          (1, request['stdout'], os.O_WRONLY | os.O_CREAT | os.O_APPEND),
                          (2, request['stderr'], os.O_WRONLY | os.O_CREAT | os.O_APPEND)):
    opened = os.open(path, flags, 0o644)
    os.dup2(opened, fd)
    os.close(opened)
  sys.stdin = open(os.devnull)
  signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, as at start-up.
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
  args = request['args']
  if 'script' in request:  # `python SCRIPT ARGS`: the script's folder first on sys.path.
    sys.argv = [request['script'], *args]
    sys.path[0] = os.path.dirname(request['script'])
    runpy.run_path(request['script'], run_name='__main__')
  elif 'code' in request:  # `python -c CODE ARGS`: the cwd first on sys.path.
    sys.argv = ['-c', *args]
    sys.path[0] = ''
    exec(compile(request['code'], '<string>', 'exec'), {'__name__': '__main__'})
  elif request.get('mocked'):  # `python tests/mocked_run.py MODULE ARGS`.
    run_mocked(request['module'], args)
  else:  # `python -m MODULE ARGS`: the cwd first on sys.path.
    sys.argv = [request['module'], *args]
    sys.path[0] = os.getcwd()
    runpy.run_module(request['module'], run_name='__main__', alter_sys=True)
  sys.exit(0)


def _reply(fd, message):
  os.write(fd, (json.dumps(message) + '\n').encode())


def _reap(fd, children):
  """Answers {"pid", "rc"} as each child ends (a thread: commands run side by side)."""
  while True:
    children.acquire()
    pid, status = os.wait()
    _reply(fd, {'pid': pid, 'rc': os.waitstatus_to_exitcode(status)})


def serve():
  """Forks one child per request line (JSON: cwd, env, stdout, stderr, then module [+ mocked],
  script or code, and args); answers {"started": pid} at once and {"pid", "rc"} when it ends."""
  import flax.linen  # noqa: F401, PLC0415  # The heavy imports every command repeats.
  import jax.numpy  # noqa: F401, PLC0415
  import ml_collections  # noqa: F401, PLC0415
  import optax  # noqa: F401, PLC0415
  import orbax.checkpoint  # noqa: F401, PLC0415
  replies = os.dup(1)
  os.dup2(2, 1)  # Anything else printed here stays off the replies.
  children = threading.Semaphore(0)
  threading.Thread(target=_reap, args=(replies, children), daemon=True).start()
  for line in sys.stdin:
    request = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
      os.close(replies)
      _child(request)
    _reply(replies, {'started': pid})
    children.release()


if __name__ == '__main__':
  if sys.argv[1:] == ['--serve']:
    serve()
  else:
    run_mocked(sys.argv[1], sys.argv[2:])
