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

A request with "fork_children" also makes the command's own `sys.executable` subprocesses
forked (the study runner's `python -m vit_jax.main` runs): its `sys.executable` is
tests/forked_python.py, which asks this server, over the unix socket named in the command's
environment, for the same child and stands in for it (output, signals, exit status).
"""

import json
import os
import runpy
import selectors
import signal
import socket
import sys
import tempfile
import threading

import forked  # noqa: E402  # Names shared with tests/forked_python.py.

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


def _child(request, fds=None):
  """In the forked child: become the requested command's process, then run it. Never returns
  (the command's SystemExit or exception ends the interpreter as it would end `python`).
  `fds`: its stdin, stdout and stderr as open descriptors (a socket request), else the
  request's stdout and stderr files and no stdin."""
  os.chdir(request['cwd'])
  os.environ.clear()
  os.environ.update(request['env'])
  if fds is None:
    fds = [os.open(path, flags, 0o644) for path, flags in (
        (os.devnull, os.O_RDONLY), (request['stdout'], os.O_WRONLY | os.O_CREAT | os.O_APPEND),
        (request['stderr'], os.O_WRONLY | os.O_CREAT | os.O_APPEND))]
  for fd, opened in enumerate(fds):
    os.dup2(opened, fd)
    os.close(opened)
  sys.stdin = os.fdopen(0, 'r', closefd=False)
  if request.get('fork_children'):
    sys.executable = forked.FORKED_PYTHON
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


def _line(message):
  """One reply: a JSON line, as both the pipe's and the socket's readers read them."""
  return (json.dumps(message) + '\n').encode()


class _Children:
  """The forked children: who waits for each one's exit status (the replies pipe, or the
  socket connection of the tests/forked_python.py that asked for it)."""

  def __init__(self, replies):
    self.replies, self.connections = replies, {}
    self.started = threading.Semaphore(0)
    self.lock = threading.Lock()  # A child's connection is known before its status is read.

  def reap(self):
    """Answers {"pid", "rc"} as each child ends (a thread: commands run side by side)."""
    while True:
      self.started.acquire()
      pid, status = os.wait()
      message = _line({'pid': pid, 'rc': os.waitstatus_to_exitcode(status)})
      with self.lock:
        connection = self.connections.pop(pid, None)
      if connection is None:
        os.write(self.replies, message)
        continue
      try:
        connection.sendall(message)
      except OSError:
        pass  # The stand-in is gone (killed): nobody waits for this status.
      connection.close()

  def start(self, request, fds, listener, connection=None):
    """Forks the child of `request` (in the main thread); returns its pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    with self.lock:
      pid = os.fork()
      if pid == 0:
        os.close(self.replies)
        request['env'][forked.SOCKET_VARIABLE] = listener.getsockname()
        listener.close()
        _child(request, fds)
      if connection is not None:
        self.connections[pid] = connection
    self.started.release()
    return pid


# A request line is written at once by tests/forked_python.py: seconds late is a broken one.
REQUEST_TIMEOUT_S = 30


def _socket_request(connection):
  """A request of tests/forked_python.py: a JSON line, with its stdin, stdout and stderr.

  Raises OSError or ValueError for one that is not (its descriptors closed): the server
  answers that connection with the error and goes on serving the others. One that never ends
  its line times out (`REQUEST_TIMEOUT_S`) rather than hold up every other command."""
  connection.settimeout(REQUEST_TIMEOUT_S)
  data, fds, _, _ = socket.recv_fds(connection, 1 << 16, 3)
  try:
    while not data.endswith(b'\n'):
      more = connection.recv(1 << 16)
      if not more:
        raise ConnectionError('tests/forked_python.py went away mid-request')
      data += more
    if len(fds) != 3:
      raise ValueError(f'{len(fds)} descriptors came with the request, not 3 (stdin, stdout, '
                       'stderr)')
    request = json.loads(data)
    if not isinstance(request, dict):
      raise ValueError(f'the request is JSON but not an object: {data[:80]!r}')
    connection.settimeout(None)  # Its exit status is sent when the child ends, however late.
    return request, fds
  except (OSError, ValueError):
    for fd in fds:
      os.close(fd)
    raise


def _refuse(connection, error):
  """Answers a request that `_socket_request` could not read with its error, and hangs up."""
  try:
    connection.sendall(_line({'error': f'{type(error).__name__}: {error}'}))
  except OSError:
    pass  # The asker is gone.
  connection.close()


def serve():
  """Forks one child per request line (JSON: cwd, env, stdout, stderr, then module [+ mocked],
  script or code, and args); answers {"started": pid} at once and {"pid", "rc"} when it ends.
  Requests of tests/forked_python.py come on a unix socket and are answered there."""
  import flax.linen  # noqa: F401, PLC0415  # The heavy imports every command repeats.
  import jax.numpy  # noqa: F401, PLC0415
  import ml_collections  # noqa: F401, PLC0415
  import optax  # noqa: F401, PLC0415
  import orbax.checkpoint  # noqa: F401, PLC0415
  replies = os.dup(1)
  os.dup2(2, 1)  # Anything else printed here stays off the replies.
  listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
  listener.bind(os.path.join(tempfile.mkdtemp(prefix='forked_'), 'socket'))
  listener.listen()
  children = _Children(replies)
  threading.Thread(target=children.reap, daemon=True).start()
  selector = selectors.DefaultSelector()
  selector.register(0, selectors.EVENT_READ)
  selector.register(listener, selectors.EVENT_READ)
  pending = b''
  while True:
    for key, _ in selector.select():
      if key.fileobj is listener:
        connection, _ = listener.accept()
        try:
          request, fds = _socket_request(connection)
        except (OSError, ValueError) as error:  # One bad request ends only its own connection.
          _refuse(connection, error)
          continue
        pid = children.start(request, fds, listener, connection)
        for fd in fds:
          os.close(fd)
        connection.sendall(_line({'started': pid}))
        continue
      chunk = os.read(0, 1 << 16)
      if not chunk:  # The test process closed its end: done.
        return
      *lines, pending = (pending + chunk).split(b'\n')
      for line in lines:
        os.write(replies, _line({'started': children.start(json.loads(line), None, listener)}))


if __name__ == '__main__':
  if sys.argv[1:] == ['--serve']:
    serve()
  else:
    run_mocked(sys.argv[1], sys.argv[2:])
