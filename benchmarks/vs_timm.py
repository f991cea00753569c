"""Speed, memory and MFU of a ViT on this machine, against timm and the plain Flax path.

  python benchmarks/vs_timm.py --model=ViT-B_16 --image=224 --batch=8 --mode=train --vs-timm \\
      --attention_impl=heads_first --repeats=5

Each variant runs in its own worker process (so the peak memory it reports is its own, and JAX
and torch never share a process): 'ours' (the flags given), 'plain' (the official path:
attention_impl='xla', float32, no remat; skipped when 'ours' is already that) and, with
--vs-timm, the equivalent timm model (act_layer='gelu_tanh', eager, torch.set_num_threads =
cores). After compile and warm-up the workers take one step each in turn, `repeats` times, so
the ratios are taken under the same load. Train mode is one step of softmax cross-entropy,
global-norm clip 1.0 and SGD momentum 0.9 (jitted with donated buffers for JAX). MFU is the
analytic FLOPs (`vit_jax.flops`, ×3 for a train step) per second over the framework's own
matmul peak in the compute dtype, measured in the same worker with a 2048² product. `--check`
also compares the logits (and, in train mode, the gradients) of 'ours' with 'plain'.

On an accelerator every variant runs on it: timm moves to CUDA when torch sees a GPU, timing
waits for the device (block_until_ready / cuda.synchronize), memory is the device's peak
allocation instead of the host's RSS, JAX workers do not preallocate (several share one GPU),
and fp32 matmuls use TF32 in both frameworks (JAX's default precision on GPU; torch is told to
match). With --dtype=bfloat16 timm runs under torch.autocast(bfloat16), the same mixed precision
(bf16 compute, fp32 params and softmax/LayerNorm statistics).

Nothing here imports TensorFlow (timm would crash after it in the same process).
"""

import json
import os
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from absl import flags

import device_stats  # device_stats.py, hugepages.py, timm_vit.py, worker_pipe.py: beside
import hugepages  # this script.
import timm_vit
import worker_pipe


def define_flags(fv: flags.FlagValues) -> None:
  """Defines this tool's flags on `fv`."""
  flags.DEFINE_string('model', 'ViT-B_16', 'ViT preset name.', flag_values=fv)
  flags.DEFINE_integer('image', 224, 'Square image side in pixels.', flag_values=fv)
  flags.DEFINE_integer('batch', 8, 'Images per step.', flag_values=fv)
  flags.DEFINE_integer('num_classes', 1000, 'Head outputs.', flag_values=fv)
  flags.DEFINE_enum('mode', 'infer', ['infer', 'train', 'both'], 'What to time.',
                    flag_values=fv)
  flags.DEFINE_bool('vs-timm', False, 'Also time the equivalent timm model.', flag_values=fv)
  flags.DEFINE_alias('vs_timm', 'vs-timm', flag_values=fv)
  flags.DEFINE_enum('attention_impl', 'xla', ['xla', 'fused', 'heads_first'],
                    'Attention implementation of "ours".', flag_values=fv)
  flags.DEFINE_enum('dtype', 'float32', ['float32', 'bfloat16'], 'Compute dtype of "ours".',
                    flag_values=fv)
  flags.DEFINE_bool('remat', False, 'Rematerialise each encoder block ("ours").', flag_values=fv)
  flags.DEFINE_bool('plain', True, 'Also time the plain official-style path.', flag_values=fv)
  flags.DEFINE_bool('check', False, 'Compare logits/gradients of "ours" with "plain".',
                    flag_values=fv)
  flags.DEFINE_enum('hugepages', 'ours', ['ours', 'all', 'none'],
                    'Workers started with glibc.malloc.hugetlb=1 (what scripts/hugepages.sh '
                    'sets for vit_jax.main): "ours" only, all (timm and plain too, the '
                    'like-for-like runtime), or none.', flag_values=fv)
  flags.DEFINE_integer('repeats', 5, 'Timed steps per variant (after warm-up).', flag_values=fv)
  flags.DEFINE_integer('warmup', 2, 'Untimed steps per variant after compiling.', flag_values=fv)
  flags.DEFINE_string('worker', None, 'Internal: run as a worker of this kind.', flag_values=fv)
  flags.DEFINE_string('timm_config', None, 'Internal: the timm worker\'s model dimensions.',
                      flag_values=fv)


def fast_params(model: Any, image: int) -> Any:
  """Parameters with the model's shapes without running `model.init` (seconds for ViT-B).

  Values are N(0, 0.02) (LayerNorm scales 1, biases 0): fine for timing, not for accuracy.
  """
  import jax
  import jax.numpy as jnp
  import numpy as np
  shapes = jax.eval_shape(
      lambda: model.init(jax.random.key(0), jnp.zeros((1, image, image, 3)), train=False))
  rng = np.random.default_rng(0)

  def fill(path, s):
    name = str(path[-1])
    if 'scale' in name:
      return np.ones(s.shape, s.dtype)
    if 'bias' in name:
      return np.zeros(s.shape, s.dtype)
    return (0.02 * rng.standard_normal(s.shape)).astype(s.dtype)
  return jax.tree_util.tree_map_with_path(fill, shapes['params'])


def make_jax_model(fv: flags.FlagValues, plain: bool) -> Any:
  from vit_jax import models
  if plain:
    return models.get_model(fv.model, num_classes=fv.num_classes)
  return models.get_model(fv.model, num_classes=fv.num_classes, attention_impl=fv.attention_impl,
                          dtype=fv.dtype, remat=fv.remat)


def make_jax_step(model: Any, mode: str, params: Any) -> Tuple[Callable[..., Any], Any]:
  """(jitted step, initial state) for 'infer' (forward) or 'train' (one optimiser update)."""
  import jax
  import jax.numpy as jnp
  import optax
  if mode == 'infer':
    return jax.jit(lambda params, x, y: model.apply({'params': params}, x, train=False)), params
  tx = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.01, momentum=0.9))

  def train_step(state, x, y):
    params, opt_state, step = state
    rng = jax.random.fold_in(jax.random.key(0), step)

    def loss_fn(p):
      logits = model.apply({'params': p}, x, train=True, rngs={'dropout': rng})
      return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state, step + 1), loss
  state = (params, tx.init(params), jnp.zeros((), jnp.int32))
  return jax.jit(train_step, donate_argnums=0), state


def jax_worker(fv: flags.FlagValues, kind: str, mode: str) -> None:
  """Compiles, warms up, then times one step per 'step' line read from stdin."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  model = make_jax_model(fv, plain=kind == 'plain')
  x = jnp.asarray(np.random.default_rng(1).uniform(-1, 1, (fv.batch, fv.image, fv.image, 3)),
                  jnp.float32)
  y = jnp.asarray(np.arange(fv.batch) % fv.num_classes, jnp.int32)
  # On the device once: a host (NumPy) tree would be copied to it again on every call.
  step, state = make_jax_step(model, mode, jax.device_put(fast_params(model, fv.image)))
  start = time.perf_counter()
  compiled = step.lower(state, x, y).compile()
  compile_s = time.perf_counter() - start

  def run():
    nonlocal state
    out = compiled(state, x, y)
    if mode == 'train':
      state = out[0]
    jax.block_until_ready(out)
  for _ in range(fv.warmup):
    run()
  dtype = 'float32' if kind == 'plain' else fv.dtype
  probe = lambda: device_stats.jax_matmul_peak(dtype=dtype)  # noqa: E731
  # On an accelerator the probe's 8192² operands would count in the peak memory: probe at the end.
  peak = probe() if jax.default_backend() == 'cpu' else 0.
  worker_pipe.emit(ready=True, compile_s=compile_s, device=device_stats.jax_device())
  _serve(run, peak, probe, device_stats.jax_peak_mb)


def timm_worker(fv: flags.FlagValues, mode: str) -> None:
  """The timm counterpart of `jax_worker` (eager, torch threads = cores; CUDA if present)."""
  import torch
  torch.set_num_threads(device_stats.cores())
  device = device_stats.torch_device()
  if device == 'cuda':  # JAX's default fp32 matmul/conv precision on GPU is TF32: match it.
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
  # `timm_config` comes from the parent: importing vit_jax.models loads jax.
  model = timm_vit.build(json.loads(fv.timm_config), fv.image, fv.num_classes, device)
  x, y = timm_vit.batch(fv.batch, fv.image, fv.num_classes, device)
  opt = timm_vit.optimizer(model)
  mixed = timm_vit.autocast(device, fv.dtype)

  def run():
    if mode == 'infer':
      with torch.inference_mode(), mixed():
        model(x)
    else:
      timm_vit.train_step(model, model, x, y, opt, mixed)
    device_stats.torch_sync()
  model.train(mode == 'train')
  start = time.perf_counter()
  run()  # Eager: the first step stands in for "compile".
  compile_s = time.perf_counter() - start
  for _ in range(fv.warmup - 1):
    run()
  probe = lambda: device_stats.torch_matmul_peak(dtype=fv.dtype)  # noqa: E731
  peak = probe() if device == 'cpu' else 0.  # As in jax_worker.
  worker_pipe.emit(ready=True, compile_s=compile_s,
        device='cpu' if device == 'cpu' else f'cuda:{torch.cuda.get_device_name()}')
  _serve(run, peak, probe, lambda: (torch.cuda.max_memory_allocated() / 2**20
                                    if device == 'cuda' else device_stats.peak_rss_mb()))


def _serve(run, peak: float, probe: Callable[[], float], peak_mb: Callable[[], float]) -> None:
  for line in sys.stdin:
    if line.strip() == 'step':
      step_s, faults = device_stats.timed(run)
      worker_pipe.emit(step_s=step_s, faults=faults)
    else:
      break
  memory = peak_mb()  # Before the last probe: its 8192² operands are not the model's.
  worker_pipe.emit(peak_mem_mb=memory, matmul_gflops=max(peak, probe()))


def check_worker(fv: flags.FlagValues, mode: str) -> None:
  """Max relative difference of logits (and train-mode gradients) of 'ours' vs 'plain'."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  import optax
  ours, plain = make_jax_model(fv, plain=False), make_jax_model(fv, plain=True)
  x = jnp.asarray(np.random.default_rng(1).uniform(-1, 1, (2, fv.image, fv.image, 3)),
                  jnp.float32)
  params = fast_params(plain, fv.image)  # Random head: logits and gradients are not zero.
  rel = lambda a, b: float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b)))  # noqa: E731
  logits = [jax.jit(lambda p, m=m: m.apply({'params': p}, x, train=False))(params)
            for m in (ours, plain)]
  result = {'logits_rel_diff': rel(*logits)}
  if mode == 'train':
    y = jnp.arange(2) % fv.num_classes
    grads = []
    for m in (ours, plain):
      def loss(p, m=m):
        logits = m.apply({'params': p}, x, train=False)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
      grads.append(jax.jit(jax.grad(loss))(params))
    # Relative to the largest gradient entry: some entries are 0 in exact maths (key biases,
    # softmax is shift-invariant) and only carry rounding noise, so per-leaf ratios mislead.
    diff = max(jax.tree.leaves(jax.tree.map(lambda a, b: jnp.max(jnp.abs(a - b)), *grads)))
    scale = max(jax.tree.leaves(jax.tree.map(lambda b: jnp.max(jnp.abs(b)), grads[1])))
    result['grads_rel_diff'] = float(diff / scale)
  worker_pipe.emit(**result)


class Worker(worker_pipe.Pipe):
  """A worker subprocess timing one step a command (`worker_pipe`)."""

  def __init__(self, kind: str, mode: str, argv: Sequence[str], huge: bool):
    cmd = [sys.executable, os.path.abspath(__file__), *argv, f'--worker={kind}',
           f'--mode={mode}']
    # Several JAX workers share one accelerator: none may grab most of its memory up front.
    env = {'XLA_PYTHON_CLIENT_PREALLOCATE': 'false', **os.environ}
    env = (hugepages.with_hugepages if huge else hugepages.without_hugepages)(env)
    self.hugepages = hugepages.active(env)
    super().__init__(kind, cmd, env)
    self.info: Dict[str, Any] = {}
    self.steps: List[float] = []
    self.faults: List[int] = []

  def step(self) -> None:
    result = self.ask('step')
    self.steps.append(result['step_s'])
    self.faults.append(result['faults'])

  def finish(self) -> None:
    self.info.update(self.close('done'))


def variant_names(fv: flags.FlagValues) -> List[str]:
  plain_config = (fv.attention_impl, fv.dtype, fv.remat) == ('xla', 'float32', False)
  names = ['ours'] + (['plain'] if fv.plain and not plain_config else [])
  return names + (['timm'] if fv.vs_timm else [])


def describe(fv: flags.FlagValues, name: str) -> str:
  if name == 'ours':
    return f'ours[{fv.attention_impl},{fv.dtype}{",remat" if fv.remat else ""}]'
  return {'plain': 'plain[xla,float32]', 'timm': 'timm eager'}[name]


def describe_worker(fv: flags.FlagValues, w: 'Worker') -> str:
  return describe(fv, w.kind) + (' +hugepages' if w.hugepages else '')


def run_mode(fv: flags.FlagValues, mode: str, argv: Sequence[str]) -> str:
  """Times every variant of one mode interleaved; returns the report lines."""
  import numpy as np
  from vit_jax.tools import flops
  from vit_jax import models
  workers = []
  for name in variant_names(fv):  # Set up one at a time: compiles don't overlap.
    workers.append(Worker(name, mode, argv, fv.hugepages == 'all' or (
        fv.hugepages == 'ours' and name == 'ours')))
    workers[-1].info.update(workers[-1].read())
  for _ in range(fv.repeats):
    for w in workers:
      w.step()
  for w in workers:
    w.finish()
  gflop = flops.count_flops(models.get_config(fv.model), fv.image, fv.num_classes)['total'] / 1e9
  step_gflop = gflop * fv.batch * (3 if mode == 'train' else 1)
  n = device_stats.cores()
  lines = [f'{fv.model} {fv.image}px batch {fv.batch} mode={mode}: {gflop:.4f} GFLOP/image '
           f'forward (analytic{", ×3 per train step" if mode == "train" else ""}), {n} cores, '
           f'XLA_FLAGS={os.environ.get("XLA_FLAGS", "")!r}',
           f'  {"variant":40s} {"compile_s":>9s} {"step_ms med/min/max":>22s} '
           f'{"images/s":>9s} {"img/s/core":>10s} {"peak_mem_MB":>11s} {"matmul_GFLOP/s":>14s} '
           f'{"MFU":>6s} {"faults/step":>11s}']
  speed = {}
  for w in workers:
    t = np.asarray(w.steps)
    med = float(np.median(t))
    speed[w.kind] = fv.batch / med
    mfu = step_gflop / med / w.info['matmul_gflops']
    lines.append(f'  {describe_worker(fv, w):40s} {w.info["compile_s"]:9.2f} '
                 f'{f"{med * 1e3:.1f}/{t.min() * 1e3:.1f}/{t.max() * 1e3:.1f}":>22s} '
                 f'{speed[w.kind]:9.2f} {speed[w.kind] / n:10.2f} {w.info["peak_mem_mb"]:11.0f} '
                 f'{w.info["matmul_gflops"]:14.1f} {mfu:6.1%} {np.median(w.faults):11.0f}')
  lines.append('  devices: ' + ', '.join(f'{describe(fv, w.kind)}={w.info["device"]}'
                                         for w in workers) +
               ' (peak_mem: device allocation on accelerators, process RSS on CPU)')
  for other in ('plain', 'timm'):
    if other in speed:
      lines.append(f'  speed-up ours/{other}: {speed["ours"] / speed[other]:.2f}x')
  if fv.check and 'plain' in speed:
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), *argv, '--worker=check',
                           f'--mode={mode}'], stdout=subprocess.PIPE, text=True, check=True)
    result = worker_pipe.last_answer(proc.stdout)
    lines.append('  check ours vs plain: ' + ', '.join(f'{k}={v:.2e}' for k, v in result.items()))
  return '\n'.join(lines)


def _run(fv: flags.FlagValues, extra: Sequence[str], argv: Sequence[str]) -> Optional[str]:
  if extra:
    raise ValueError(f'Unexpected arguments {extra}; see --help.')
  if fv.worker == 'timm':
    timm_worker(fv, fv.mode)
    return None
  from vit_jax import models
  from vit_jax import presets
  config = models.get_config(fv.model)
  record = presets.record_of(config)
  if not record.timm_vit or record.resnet_root:  # timm's plain ViT is what it times against.
    raise ValueError(f'benchmark times plain ViT presets; {fv.model} is not one.')
  if fv.batch < 1 or fv.repeats < 1 or fv.image < 1:
    raise ValueError('--batch, --repeats and --image must be positive.')
  if fv.worker:
    if fv.worker == 'check':
      check_worker(fv, fv.mode)
    else:
      jax_worker(fv, fv.worker, fv.mode)
    return None
  argv = [a for a in argv[1:] if a.split('=')[0] not in ('--mode', '--worker')]
  argv.append('--timm_config=' + json.dumps(timm_vit.dims(config)))
  modes = ('infer', 'train') if fv.mode == 'both' else (fv.mode,)
  return '\n'.join(run_mode(fv, mode, argv) for mode in modes)


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Command-line entry point; returns the exit status (1 and one line on bad input).

  The flags live in this script's own FlagValues (a benchmark, not a package tool: the tests
  import it beside the tools, whose --model and --image it would clash with).
  """
  argv = list(sys.argv if argv is None else argv)
  fv = flags.FlagValues()
  define_flags(fv)
  if any(a in ('-h', '--help', '--helpfull') for a in argv[1:]):
    print(__doc__ + '\nFlags:\n' + fv.get_help())
    return 0
  try:
    output = _run(fv, fv(argv)[1:], argv)
  except (flags.Error, ValueError, OSError) as e:
    print(f'benchmark: error: {e}', file=sys.stderr)
    return 1
  if output:
    print(output)
  return 0


if __name__ == '__main__':
  sys.exit(main())
