r"""End to end on one GPU: `python -m vit_jax.main` training ViT-B/16 from a folder of JPEGs.

  python benchmarks/gpu_e2e.py --out=gpu_e2e_out               # an H100 or H200: < 8 minutes
  python benchmarks/gpu_e2e.py --tiny --out=/tmp/gpu_e2e_tiny  # the same stages on CPU, small

Four stages, one call (stage 1's JPEGs are benchmarks/e2e_jpegs.py; the step-only worker
processes of stages 3 and 4 are benchmarks/e2e_workers.py):
1. JPEGs: `--images` train files (+ 10 per class in test/) at 500x375, `--classes` folders, a
   few random textures per class, written in parallel under `--scratch` (reused when there).
2. End to end: `python -m vit_jax.main --config=configs/vit.py:b16,<folder>` from scratch at
   224 px, bf16, `attention_impl='fused'` (cuDNN flash attention on GPU), `--batch`,
   `accum_steps=1`, `--steps` steps, eval and an orbax checkpoint at the end. Figures come from
   the run's own records (metrics.jsonl): img/s over the progress intervals after the first
   (which holds the compile), the data-wait fraction (time the train loop spent in
   `next(batches)` over the interval's time; with async dispatch the device may still be
   busy meanwhile, so it bounds the device's idle time from above), MFU (3 x the forward
   FLOPs of `vit_jax.flops` per image over `--peak_tflops` per device), peak device memory
   (`memory_stats()`; none on CPU) and the train step's compile time (JAX's compile log).
3. Step-only: the same jitted `train.make_train_step` on one synthetic batch on the device,
   against timm's VisionTransformer of the same dimensions (bf16 autocast, `torch.compile`,
   channels-last, SGD momentum 0.9 + clip 1.0 + cross-entropy, the same batch), each in its
   own process; after compiling they run `--block_steps` steps in turn (A/B/A/B, `--rounds`
   rounds) and the median block gives img/s.
4. A `jax.profiler` trace of `--profile_steps` steps of the step-only run, in `--out`/profile
   (TensorBoard's profile plugin or xprof opens it).

Writes `--out`/gpu_e2e.json (every figure and the settings), the run's e2e.log and
metrics.jsonl, and prints a markdown row for docs/performance.md. `--tiny` swaps in the
`testing` preset at 32 px, a few dozen 64x48 JPEGs, a few steps and eager timm: the same code
on CPU in about a minute. Off-by-default switches: `--prefetch` (config.prefetch: batches
ready on the device and in tf.data) and `--xla_flags` (appended to XLA_FLAGS of every JAX
process, e.g. `--xla_gpu_enable_latency_hiding_scheduler=true`).
"""

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from absl import flags

import e2e_jpegs  # Siblings in benchmarks/: the script's directory is on sys.path.
import e2e_workers
import timm_vit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The two presets; a flag given on the command line wins over its preset's value.
PRESETS = {
    'full': dict(model='b16', images=20_000, classes=100, jpeg_size=(500, 375), crop=224,
                 batch=256, steps=300, progress_every=20, torch_compile=True, rounds=5,
                 block_steps=10, profile_steps=3),
    'tiny': dict(model='testing', images=32, classes=4, jpeg_size=(64, 48), crop=32,
                 batch=8, steps=6, progress_every=2, torch_compile=False, rounds=2,
                 block_steps=2, profile_steps=1),
}
TEST_PER_CLASS = {'full': 10, 'tiny': 2}

def define_flags(fv: flags.FlagValues) -> None:
  """Defines this script's flags on `fv` (its own FlagValues: the tools' --model, --out and
  --image live in absl's global ones, which a test importing this script beside the tools
  would define twice)."""
  d = dict(flag_values=fv)
  flags.DEFINE_bool('tiny', False, 'CPU-sized preset (testing model, 32 px, a few steps).', **d)
  flags.DEFINE_string('out', 'gpu_e2e_out', 'Folder for gpu_e2e.json, logs and the trace.', **d)
  flags.DEFINE_string('scratch', None, 'Local folder for the JPEGs (reused) and the run '
                      'directory (default: /tmp/gpu_e2e or /tmp/gpu_e2e_tiny).', **d)
  flags.DEFINE_string('model', None, 'configs/vit.py model name (preset: b16).', **d)
  flags.DEFINE_integer('images', None, 'Train JPEGs (preset: 20000).', **d)
  flags.DEFINE_integer('classes', None, 'Class folders (preset: 100).', **d)
  flags.DEFINE_integer('batch', None, 'Global batch, end to end and step-only (preset: 256; '
                       'ViT-B/16 bf16 at 128 took 10.6 GB on an H100).', **d)
  flags.DEFINE_integer('steps', None, 'Train steps of the end-to-end run (preset: 300).', **d)
  flags.DEFINE_integer('progress_every', None, 'Steps per measured interval (preset: 20).', **d)
  flags.DEFINE_enum('attention_impl', 'fused', ['xla', 'fused', 'heads_first'],
                    'config.model.attention_impl.', **d)
  flags.DEFINE_enum('dtype', 'bfloat16', ['float32', 'bfloat16'], 'Compute dtype.', **d)
  flags.DEFINE_integer('pad_tokens', 0, 'config.model.pad_tokens: pad the tokens once before the '
                       'blocks to a multiple of this (8: 197 -> 200); 0 = off.', **d)
  flags.DEFINE_bool('uint8_batches', False, 'config.pp.uint8_batches: uint8 train batches, '
                    'normalised in the train step (a quarter of the bytes).', **d)
  flags.DEFINE_float('peak_tflops', 989., 'Dense peak per device in the compute dtype, TFLOP/s '
                     '(H100 SXM and H200 bf16: 989).', **d)
  flags.DEFINE_integer('prefetch', None, 'config.prefetch (default: the config\'s).', **d)
  flags.DEFINE_string('xla_flags', '', 'Appended to XLA_FLAGS of the JAX processes.', **d)
  flags.DEFINE_bool('timm', True, 'Run the step-only comparison with timm.', **d)
  flags.DEFINE_bool('torch_compile', None, 'torch.compile the timm model (preset: on; off with '
                    '--tiny).', **d)
  flags.DEFINE_integer('rounds', None, 'Step-only A/B rounds (preset: 5).', **d)
  flags.DEFINE_integer('block_steps', None, 'Step-only steps per timed block (preset: 10).', **d)
  flags.DEFINE_integer('profile_steps', None, 'Steps in the profile trace (0: none).', **d)


@dataclasses.dataclass
class Settings:
  """What one benchmark run does: a preset with the command line's flags on top."""
  preset: str
  model: str
  images: int
  classes: int
  jpeg_size: Sequence[int]
  crop: int
  batch: int
  steps: int
  progress_every: int
  torch_compile: bool
  rounds: int
  block_steps: int
  profile_steps: int
  attention_impl: str
  dtype: str
  pad_tokens: int
  uint8_batches: bool
  peak_tflops: float
  prefetch: Optional[int]
  xla_flags: str
  timm: bool
  scratch: str
  out: str


def settings_from_flags(fv: flags.FlagValues) -> Settings:
  """The preset `--tiny` names, each value replaced by its flag where that was given."""
  preset = 'tiny' if fv.tiny else 'full'
  values = dict(PRESETS[preset])
  values.update({k: fv[k].value for k in values if k in fv and fv[k].value is not None})
  settings = Settings(
      preset=preset, attention_impl=fv.attention_impl, dtype=fv.dtype,
      pad_tokens=fv.pad_tokens, uint8_batches=fv.uint8_batches, peak_tflops=fv.peak_tflops,
      prefetch=fv.prefetch,
      xla_flags=fv.xla_flags, timm=fv.timm,
      out=os.path.abspath(fv.out),
      scratch=os.path.abspath(fv.scratch or f'/tmp/gpu_e2e{"_tiny" if fv.tiny else ""}'),
      **values)
  for name in ('images', 'classes', 'batch', 'steps', 'progress_every', 'rounds', 'block_steps'):
    if getattr(settings, name) < 1:
      raise ValueError(f'--{name}={getattr(settings, name)} must be at least 1.')
  if settings.steps < 2 * settings.progress_every:
    raise ValueError(f'--steps={settings.steps} leaves no interval after the first (which holds '
                     f'the compile); use at least 2 x --progress_every={settings.progress_every}.')
  if settings.peak_tflops <= 0:
    raise ValueError(f'--peak_tflops={settings.peak_tflops} must be positive.')
  if settings.profile_steps < 0:
    raise ValueError(f'--profile_steps={settings.profile_steps} must be 0 (no trace) or more.')
  return settings


def config_overrides(settings: Settings) -> Dict[str, Any]:
  """The `--config.*` fields of the end-to-end run (the step-only worker applies the same)."""
  overrides = {
      'pretrained_dir': '', 'pp.crop': settings.crop, 'batch': settings.batch,
      'batch_eval': settings.batch, 'accum_steps': 1, 'total_steps': settings.steps,
      'warmup_steps': max(settings.steps // 10, 1), 'progress_every': settings.progress_every,
      'eval_every': settings.steps, 'checkpoint_every': 0,
      'model.dtype': settings.dtype, 'model.attention_impl': settings.attention_impl,
      'model.pad_tokens': settings.pad_tokens, 'pp.uint8_batches': settings.uint8_batches}
  if settings.prefetch is not None:
    overrides['prefetch'] = settings.prefetch
  return overrides


def config_spec(settings: Settings, folder: str) -> str:
  if ',' in folder or ':' in folder:
    raise ValueError(f'--scratch={settings.scratch} holds "," or ":" that configs/vit.py:'
                     'MODEL,DATASET cannot carry; pick another folder.')
  return f'{os.path.join(ROOT, "configs", "vit.py")}:{settings.model},{folder}'


def e2e_command(settings: Settings, folder: str, workdir: str) -> List[str]:
  """The `python -m vit_jax.main` command of the end-to-end run."""
  return [sys.executable, '-m', 'vit_jax.main', f'--config={config_spec(settings, folder)}',
          f'--workdir={workdir}'] + [
              f'--config.{k}={v}' for k, v in config_overrides(settings).items()]


def jax_env(settings: Settings, **extra: str) -> Dict[str, str]:
  """This environment with `--xla_flags` appended to XLA_FLAGS and the repo importable."""
  env = dict(os.environ, **extra)
  env['XLA_FLAGS'] = ' '.join(filter(None, [env.get('XLA_FLAGS', ''), settings.xla_flags]))
  env['PYTHONPATH'] = os.pathsep.join(filter(None, [ROOT, env.get('PYTHONPATH')]))
  return env


def run_e2e(settings: Settings, folder: str) -> Dict[str, Any]:
  """Runs the end-to-end training; returns its records, log and wall time."""
  workdir = tempfile.mkdtemp(prefix='run_', dir=settings.scratch)
  command = e2e_command(settings, folder, workdir)
  log_path = os.path.join(settings.out, 'e2e.log')
  start = time.perf_counter()
  with open(log_path, 'w') as log:
    code = subprocess.call(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                           env=jax_env(settings, JAX_LOG_COMPILES='1'))
  wall = time.perf_counter() - start
  with open(log_path) as f:
    log_text = f.read()
  if code:
    raise RuntimeError(f'the end-to-end run exited with {code}; its log is {log_path}:\n'
                       + log_text[-3000:])
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    records = [json.loads(line) for line in f]
  with open(os.path.join(settings.out, 'metrics.jsonl'), 'w') as f:
    f.writelines(json.dumps(r) + '\n' for r in records)
  return {'records': records, 'log': log_text, 'wall_s': wall, 'workdir': workdir,
          'command': shlex.join(['python', *command[1:]])}


def steady_state(records: Sequence[Dict[str, float]], batch: int,
                 devices: int) -> Dict[str, Any]:
  """img/s and data-wait over the progress intervals after the first, from metrics.jsonl.

  Each train record covers the steps since the previous one; its `img_sec_core_train` (per
  device) gives the interval's seconds. The first interval holds the compile and the
  pipeline's start-up: it is left out of the rates and reported as overhead beyond its steps.
  """
  train = [r for r in records if 'img_sec_core_train' in r]
  if len(train) < 2:
    raise ValueError(f'{len(train)} progress interval(s) recorded; the steady state needs 2+.')
  steps = np.diff([0] + [r['step'] for r in train])
  seconds = batch * steps / (np.array([r['img_sec_core_train'] for r in train]) * devices)
  waits = np.array([r['data_wait_fraction'] for r in train])
  steady_s, steady_steps = seconds[1:].sum(), steps[1:].sum()
  peaks = [r['peak_memory_mb'] for r in train if 'peak_memory_mb' in r]
  return {
      'img_s': float(batch * steady_steps / steady_s),
      'data_wait_fraction': float((waits[1:] * seconds[1:]).sum() / steady_s),
      'first_interval_overhead_s': float(seconds[0] - steps[0] * steady_s / steady_steps),
      'interval_img_s': [float(batch * n / s) for n, s in zip(steps, seconds)],
      'interval_data_wait': [float(w) for w in waits],
      'peak_memory_mb': max(peaks) if peaks else None,
      'final_train_loss': float(train[-1]['train_loss'])}


_COMPILE_LOG = re.compile(
    r'Finished (?:tracing(?: \+ transforming)?|jaxpr to MLIR module conversion|'
    r'XLA compilation of) (?:jit\()?train_step\)?\b.*? in ([0-9.]+) ?sec')


def train_step_compile_s(log_text: str) -> Optional[float]:
  """Seconds JAX logged (JAX_LOG_COMPILES) tracing, lowering and compiling `train_step`."""
  times = [float(t) for t in _COMPILE_LOG.findall(log_text)]
  return sum(times) if times else None


def worker_spec(settings: Settings, folder: str) -> Dict[str, Any]:
  """What both workers build: the e2e run's config (jax) and its dimensions (timm)."""
  from vit_jax import config_lib  # noqa: PLC0415  # Configs load without jax.
  path, arg = config_spec(settings, folder).split(':', 1)
  config = config_lib.load_config_module(path).get_config(arg)
  return {'config': config_spec(settings, folder), 'overrides': config_overrides(settings),
          'batch': settings.batch, 'crop': settings.crop, 'classes': settings.classes,
          'dtype': settings.dtype, 'torch_compile': settings.torch_compile,
          'profile_dir': os.path.join(settings.out, 'profile'),
          'timm': timm_vit.dims(config.model)}


def run_step_only(settings: Settings, folder: str) -> Dict[str, Any]:
  """Both workers compile side by side, then run blocks in turn; the jax one is profiled.

  A timm worker that fails to start (torch.compile or memory) is reported in 'errors' and the
  jax figures are kept: the run is meant to be made once, on a lent machine.
  """
  spec = worker_spec(settings, folder)
  env = jax_env(settings, XLA_PYTHON_CLIENT_PREALLOCATE='false')  # They share the device.
  started = [e2e_workers.Worker(k, env, spec)
             for k in ['jax'] + (['timm'] if settings.timm else [])]
  ready, errors = {}, {}
  for w in started:
    try:
      ready[w.kind] = w.read()
    except RuntimeError as e:
      if w.kind == 'jax':
        raise
      errors[w.kind] = str(e)
  workers = [w for w in started if w.kind in ready]
  for _ in range(settings.rounds):
    for w in workers:
      w.block(settings.block_steps)
  trace = (workers[0].ask(f'profile {settings.profile_steps}')
           if settings.profile_steps else {'trace': []})
  result = {}
  for w in workers:
    done = w.finish()
    median = float(np.median(w.blocks))
    result[w.kind] = dict(ready[w.kind], **done, img_s=settings.batch * settings.block_steps /
                          median, block_s=w.blocks)
  result['jax'].update(trace)
  return {'workers': result, 'errors': errors}


def summarize(settings: Settings, e2e: Dict[str, Any], step_only: Dict[str, Any],
              stage_s: Dict[str, float]) -> Dict[str, Any]:
  """Every figure of the run, as gpu_e2e.json holds it.

  MFU is img/s x 3 x the forward FLOPs per image (`vit_jax.flops`, counted by the jax worker
  for the run's model, crop and classes) over `--peak_tflops` x the devices.
  """
  errors, step_only = step_only['errors'], step_only['workers']
  ours = step_only['jax']
  flops_per_image = ours['train_flops_per_image']
  devices = ours['devices']
  steady = steady_state(e2e['records'], settings.batch, devices)
  peak_flops = settings.peak_tflops * 1e12 * devices
  mfu = lambda img_s: img_s * flops_per_image / peak_flops  # noqa: E731
  result = {
      'date': time.strftime('%Y-%m-%d', time.gmtime()), 'device': ours['device'],
      'devices': devices, 'settings': dataclasses.asdict(settings),
      'e2e_command': e2e['command'], 'e2e_wall_s': e2e['wall_s'],
      'train_flops_per_image': flops_per_image, 'peak_tflops': settings.peak_tflops,
      'e2e_img_s': steady['img_s'], 'mfu': mfu(steady['img_s']),
      'data_wait_fraction': steady['data_wait_fraction'],
      'peak_memory_mb': steady['peak_memory_mb'],
      'compile_s': train_step_compile_s(e2e['log']),
      'first_interval_overhead_s': steady['first_interval_overhead_s'],
      'interval_img_s': steady['interval_img_s'],
      'interval_data_wait': steady['interval_data_wait'],
      # A persistent compilation cache turns compile_s into a cache read: say when one was on.
      'compilation_cache': os.environ.get('JAX_COMPILATION_CACHE_DIR'),
      'final_train_loss': steady['final_train_loss'], 'stage_s': stage_s,
      'step_only': {k: dict(v, mfu=mfu(v['img_s'])) for k, v in step_only.items()},
      'step_only_errors': errors}
  result['e2e_over_step_only'] = result['e2e_img_s'] / ours['img_s']
  if 'timm' in step_only:
    result['ours_over_timm'] = ours['img_s'] / step_only['timm']['img_s']
  return result


def markdown_row(r: Dict[str, Any]) -> str:
  """| date | device | batch | e2e img/s | MFU | data-wait | peak GB | compile s | step-only |."""
  s = r['settings']
  memory = '–' if r['peak_memory_mb'] is None else f'{r["peak_memory_mb"] / 1024:.1f}'
  compile_s = '–' if r['compile_s'] is None else f'{r["compile_s"]:.0f}'
  timm = r['step_only'].get('timm')
  timm_text = (f'{timm["img_s"]:.0f} ({"compiled" if s["torch_compile"] else "eager"})'
               if timm else '–')
  return (f'| {r["date"]} | {r["device"]} | {s["model"]} {s["crop"]}px b{s["batch"]} '
          f'{s["dtype"]} {s["attention_impl"]} | {r["e2e_img_s"]:.0f} | {r["mfu"]:.1%} | '
          f'{r["data_wait_fraction"]:.1%} | {memory} | {compile_s} | '
          f'{r["step_only"]["jax"]["img_s"]:.0f} | {timm_text} |')


MARKDOWN_HEADER = ('| date | device | run | e2e img/s | MFU | data-wait | peak GB | compile s | '
                   'step-only img/s | timm step-only img/s |\n|---|---|---|---|---|---|---|---|'
                   '---|---|')


def run_benchmark(settings: Settings) -> Dict[str, Any]:
  """The four stages; writes gpu_e2e.json and returns its contents."""
  os.makedirs(settings.out, exist_ok=True)
  stage_s, start = {}, time.perf_counter()
  folder = e2e_jpegs.write_jpegs(settings.scratch, settings.images, settings.classes,
                                  TEST_PER_CLASS[settings.preset], settings.jpeg_size)
  stage_s['jpegs'] = time.perf_counter() - start
  print(f'JPEGs in {folder} ({stage_s["jpegs"]:.0f} s); training end to end...', flush=True)
  e2e = run_e2e(settings, folder)
  stage_s['e2e'] = e2e['wall_s']
  print(f'End to end done ({e2e["wall_s"]:.0f} s); step-only...', flush=True)
  start = time.perf_counter()
  step_only = run_step_only(settings, folder)
  stage_s['step_only'] = time.perf_counter() - start
  result = summarize(settings, e2e, step_only, stage_s)
  with open(os.path.join(settings.out, 'gpu_e2e.json'), 'w') as f:
    json.dump(result, f, indent=1)
  return result


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Command-line entry point; returns the exit status (1 and one line on bad input)."""
  argv = list(sys.argv if argv is None else argv)
  fv = flags.FlagValues()
  define_flags(fv)
  if any(a in ('-h', '--help', '--helpfull') for a in argv[1:]):
    print(__doc__ + '\nFlags:\n' + fv.get_help())
    return 0
  try:
    extra = fv(argv)[1:]
    if extra:
      raise ValueError(f'unexpected arguments {extra}; see --help.')
    settings = settings_from_flags(fv)
  except (flags.Error, ValueError) as e:
    print(f'gpu_e2e: error: {e}', file=sys.stderr)
    return 1
  r = run_benchmark(settings)
  compile_s = 'not logged' if r['compile_s'] is None else f'{r["compile_s"]:.1f} s'
  print(f'{r["device"]}: end to end {r["e2e_img_s"]:.1f} img/s, MFU {r["mfu"]:.1%} of '
        f'{r["peak_tflops"]:g} TFLOP/s, data-wait {r["data_wait_fraction"]:.1%}, compile '
        f'{compile_s}; step-only {r["step_only"]["jax"]["img_s"]:.1f} img/s '
        f'(e2e/step-only {r["e2e_over_step_only"]:.2f})'
        + (f', ours/timm {r["ours_over_timm"]:.2f}' if 'ours_over_timm' in r else '')
        + ''.join(f'; {k} failed: {v}' for k, v in r['step_only_errors'].items()))
  print(f'Wrote {os.path.join(settings.out, "gpu_e2e.json")}; trace in '
        f'{os.path.join(settings.out, "profile")}.\n{MARKDOWN_HEADER}\n{markdown_row(r)}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
