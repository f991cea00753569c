"""Smoke tests of `benchmarks/vs_timm.py` (no timing asserts) and of the CPU attention fast path."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'benchmarks')
sys.path.insert(0, BENCHMARKS)
import vs_timm as benchmark  # noqa: E402  # A script in benchmarks/, not part of the package.
import worker_pipe  # noqa: E402
from absl import flags  # noqa: E402

from vit_jax import models  # noqa: E402

FIELDS = ('compile_s', 'step_ms med/min/max', 'images/s', 'img/s/core', 'peak_mem_MB',
          'matmul_GFLOP/s', 'MFU', 'GFLOP/image', 'faults/step')


@pytest.mark.parametrize('mode', ['infer', 'train'])
def test_benchmark_smoke(mode, capsys):
  argv = ['benchmark', '--model=testing', '--image=32', '--batch=2', f'--mode={mode}',
          '--attention_impl=heads_first', '--repeats=1', '--warmup=1', '--check']
  assert benchmark.main(argv) == 0
  out = capsys.readouterr().out
  for field in FIELDS:
    assert field in out
  assert 'ours[heads_first,float32]' in out and 'plain[xla,float32]' in out
  assert 'speed-up ours/plain' in out
  assert 'ours[heads_first,float32]=cpu' in out  # Every variant says where it ran.
  assert 'logits_rel_diff' in out
  if mode == 'train':
    assert 'grads_rel_diff' in out


def test_benchmark_rejects_hybrids(capsys):
  assert benchmark.main(['benchmark', '--model=R50+ViT-B_16']) == 1
  assert 'plain ViT presets' in capsys.readouterr().err


def _tiny(**kwargs):
  config = models.get_config('testing')
  config.transformer.num_heads = 2
  return models.get_model(config, num_classes=5, **kwargs)


@pytest.mark.parametrize('kwargs', [dict(attention_impl='heads_first'),
                                    dict(attention_impl='heads_first', remat=True)])
def test_fast_path_matches_plain(kwargs):
  x = jax.random.uniform(jax.random.key(1), (2, 32, 32, 3), minval=-1., maxval=1.)
  plain, fast = _tiny(), _tiny(**kwargs)
  params = plain.init(jax.random.key(0), x, train=False)['params']
  # The head is zero-initialised: make it random so logits depend on everything below.
  params['head']['kernel'] = jax.random.normal(jax.random.key(2), params['head']['kernel'].shape)
  a = plain.apply({'params': params}, x, train=False)
  b = fast.apply({'params': params}, x, train=False)
  np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-5 * float(jnp.abs(a).max()))

  def grads(model):
    loss = lambda p: jnp.sum(model.apply({'params': p}, x, train=False)**2)  # noqa: E731
    return jax.grad(loss)(params)
  ga, gb = grads(plain), grads(fast)
  scale = max(float(jnp.abs(g).max()) for g in jax.tree.leaves(ga))
  for u, v in zip(jax.tree.leaves(ga), jax.tree.leaves(gb)):
    np.testing.assert_allclose(v, u, atol=1e-5 * scale)


def test_root_conv_benchmark_smoke():
  script = os.path.join(BENCHMARKS, 'root_conv.py')
  # absl flags: `--flag value` and `--flag=value` both parse.
  out = subprocess.run([sys.executable, script, '--batch', '2', '--image=16', '--repeats=1'],
                       capture_output=True, text=True, check=True, timeout=300).stdout
  assert 'lax.conv_general_dilated: median' in out and 'conv_as_matmul: median' in out
  diff = float(out.split('max |outputs diff| ')[1].split(',')[0])
  assert 'speed-up: ' in out and diff < 1e-4


def test_imported_benchmarks_define_no_global_flags():
  """Importing vs_timm.py (and with it hugepages.py) or quickstart_steps.py adds nothing to
  absl's global flags.

  A process may import them beside the tools (these tests do; quickstart_steps' --tfds_data_dir
  once broke the fewshot tool's tests in CI): vs_timm.py keeps its flags in its own FlagValues,
  the others define theirs only when run, so none can clash.
  """
  import quickstart_steps  # noqa: F401, PLC0415  # A script in benchmarks/.
  assert {m for m in flags.FLAGS.flags_by_module_dict()
          if os.path.basename(m).split('.')[0] in ('vs_timm', 'hugepages', 'quickstart_steps')
          } == set()


def _pipe(code):
  return worker_pipe.Pipe('demo', [sys.executable, '-c', code], os.environ)


def test_a_worker_answers_past_other_output_and_an_early_exit_is_named():
  echo = (f'import json, sys\nprint("a library log line", flush=True)\n'
          f'print({worker_pipe.MARK!r} + json.dumps({{"got": sys.stdin.readline().strip()}}))')
  assert _pipe(echo).close('hello') == {'got': 'hello'}
  with pytest.raises(RuntimeError, match='the demo worker exited with 3'):
    _pipe('print("no answer"); raise SystemExit(3)').read()


def test_timm_vit_is_our_model_in_timm():
  """Both benchmarks' timm side (benchmarks/timm_vit.py) builds our ViT's dimensions: the same
  parameter count as ours, logits of our shape, and one train step changes its weights."""
  import timm_vit  # noqa: PLC0415  # Beside vs_timm.py in benchmarks/.
  import torch  # noqa: PLC0415
  config = models.get_config('testing')
  ours = models.VisionTransformer(num_classes=10, **config)
  params = jax.eval_shape(lambda: ours.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)),
                                            train=False))['params']
  theirs = timm_vit.build(timm_vit.dims(config), 32, 10, 'cpu')
  assert sum(p.numel() for p in theirs.parameters()) == sum(
      int(np.prod(p.shape)) for p in jax.tree.leaves(params))
  x, y = timm_vit.batch(4, 32, 10, 'cpu')
  assert theirs(x).shape == (4, 10) and y.tolist() == [0, 1, 2, 3]
  before = [p.detach().clone() for p in theirs.parameters()]
  timm_vit.train_step(theirs, theirs, x, y, timm_vit.optimizer(theirs),
                      timm_vit.autocast('cpu', 'float32'))
  assert all(not torch.equal(a, b) for a, b in zip(before, theirs.parameters()))


def test_quickstart_steps_benchmark_reads_its_runs_and_prints_the_ratio(tmp_path):
  """`benchmarks/quickstart_steps.py`: the quickstart's stage-1 config shortened, a run's
  intervals read from its metrics.jsonl (training mocked: seconds, not a run), the summary."""
  import quickstart_steps  # noqa: PLC0415  # A script in benchmarks/.
  config = quickstart_steps.stage1_config(quickstart_steps.REPO, 300, {'batch': 64})
  assert (config.total_steps, config.batch, config.pp.crop) == (300, 64, 28)
  assert config.progress_every == 50 and config.model.hidden_size == 128

  def fake_run(config, workdir):
    os.makedirs(workdir)
    with open(os.path.join(workdir, 'metrics.jsonl'), 'w') as f:
      for step, rate in ((50, 1.), (100, 10.), (100, 0.5)):
        row = {'step': step, 'img_sec_core_train': rate} if rate > 0.6 else {'test_acc': rate}
        f.write(json.dumps(row) + '\n')

  result = quickstart_steps.run_stage1(config, str(tmp_path / 'run'), fake_run)
  assert result['steps'] == [50, 100] and result['img_s_core'] == [1., 10.]
  assert result['cpu_ms_per_img'] == []  # Measured only around vit_jax's own training.
  ref = dict(result, name='ref', round=0, img_s_core=[1., 10., 20., 30.],
             cpu_ms_per_img=[2., 2.5, 3.])
  ours = dict(result, name='ours', round=0, img_s_core=[1., 12., 24., 36.],
              cpu_ms_per_img=[2., 2., 2.])
  assert quickstart_steps.speed(ref) == 20.  # The first interval (the compile) left out.
  text = quickstart_steps.summary([ref, ours])
  assert 'ours / ref, img/s/core: median 1.200, range 1.200-1.200 over 1 rounds' in text
  assert 'ours / ref, CPU ms per image: median 0.800' in text
