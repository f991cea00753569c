"""Tests for vit_jax.flops: hand-checked counts, published references, and XLA's own count."""

import os
import subprocess
import sys

import pytest

from vit_jax.tools import cli
from vit_jax.families.resnet import flops as resnet_counter
from vit_jax.tools import flops
from vit_jax import models


def test_testing_preset_by_hand():
  # 64px, patch 16 → 4x4 grid + class token = 17 tokens; hidden 10, mlp 10, 1 layer, 5 classes.
  got = flops.count_flops(models.get_config('testing'), 64, num_classes=5)
  n, d = 17, 10
  assert got == {
      'patch_embedding': 2 * 16 * (16 * 16 * 3) * d,
      'qkv_out_projections': 4 * 2 * n * d * d,
      'attention': 2 * 2 * n * n * d,
      'mlp': 2 * 2 * n * d * 10,
      'head': 2 * d * 5,
      'total': sum([2 * 16 * 768 * d, 8 * n * d * d, 4 * n * n * d, 4 * n * d * 10, 2 * d * 5]),
  }


@pytest.mark.parametrize('name, gflops', [('ViT-Ti_16', 2.507), ('ViT-B_16', 35.13)])
def test_reference_numbers(name, gflops):
  got = flops.count_flops(models.get_config(name), 224, num_classes=0)['total']
  assert got / 1e9 == pytest.approx(gflops, rel=5e-4)


def test_hybrid_resnet_geometry():
  # R50 (3, 4, 9) at 224: 14x14x1024 features, then 1x1 "patches" → the same 197 tokens as B/16.
  resnet_flops, hw, channels = resnet_counter.resnet_flops(
      models.get_config('R50+ViT-B_16').resnet, (224, 224))
  assert (hw, channels) == ((14, 14), 1024)
  assert 7.5e9 < resnet_flops < 8.2e9  # ~ ResNet-50's first three stages (4.1 GMAC in all).
  got = flops.count_flops(models.get_config('R50+ViT-B_16'), 224)
  vit = flops.count_flops(models.get_config('ViT-B_16'), 224)
  assert got['attention'] == vit['attention'] and got['mlp'] == vit['mlp']
  assert got['patch_embedding'] == 2 * 196 * 1024 * 768


def test_unpooled_and_representation_heads():
  config = models.get_config('testing-unpooled')
  assert flops.count_flops(config, 32, num_classes=3)['head'] == 4 * 2 * 10 * 3  # Per token.
  config = models.get_config('ViT-B_16')
  config.representation_size = 768
  assert flops.count_flops(config, 224, num_classes=2)['head'] == 2 * (768 * 768 + 768 * 2)


def test_doubling_table():
  rows = {r['change']: r for r in flops.scaling_table(models.get_config('ViT-B_16'), 224)}
  assert rows['baseline']['attention_ratio'] == 1.
  assert rows['hidden size ×2']['attention_ratio'] == pytest.approx(2.)
  assert rows['depth ×2']['attention_ratio'] == pytest.approx(2.)
  assert rows['depth ×2']['total_ratio'] == pytest.approx(2., rel=0.01)
  assert rows['image side ×2']['attention_ratio'] == pytest.approx((785 / 197)**2)
  assert rows['patch size ×2']['attention_ratio'] == pytest.approx((50 / 197)**2)


@pytest.mark.parametrize('name', ['ViT-Ti_16', 'ViT-B_16', 'R50+ViT-B_16'])
def test_matches_xla_cost_analysis(name):
  # Nothing big is materialised: params and images are ShapeDtypeStructs. XLA also counts the
  # element-wise ops (norms, softmax, GELU), so it is a little higher (~0.3-1.3%).
  analytic = flops.count_flops(models.get_config(name), 224)['total']
  xla = flops.xla_flops(name, 224)
  assert xla == pytest.approx(analytic, rel=0.02)


def test_swin_by_hand():
  # Swin-testing at 40px: patch 4 → 10x10 (window 4: padded to 12x12, 9 windows), merged to
  # 5x5 (window 4 again: padded to 8x8); widths 16, 32; MLP 4x; 3 classes.
  got = flops.count_flops(models.get_config('Swin-testing'), 40, num_classes=3)
  assert got == {
      'patch_embedding': 2 * 100 * (4 * 4 * 3) * 16,
      'patch_merging': 2 * 25 * 64 * 32,
      'qkv_out_projections': 2 * (4 * 2 * 144 * 16 * 16) + 2 * (4 * 2 * 64 * 32 * 32),
      'attention': 2 * (2 * 2 * 144 * 16 * 16) + 2 * (2 * 2 * 64 * 16 * 32),
      'mlp': 2 * (2 * 2 * 100 * 16 * 64) + 2 * (2 * 2 * 25 * 32 * 128),
      'head': 2 * 32 * 3,
      'total': sum([9600 * 16, 102400, 2 * 294912 + 2 * 524288, 2 * 147456 + 2 * 131072,
                    2 * 409600 + 2 * 409600, 192]),
  }


def test_swin_attention_is_linear_in_tokens():
  config = models.get_config('Swin-T_4_7')
  # 224 → 448px: every stage's map doubles per side and stays a multiple of the window.
  small, large = (flops.count_flops(config, s)['attention'] for s in (224, 448))
  assert large == 4 * small
  vit = [flops.count_flops(models.get_config('ViT-B_16'), s)['attention'] for s in (224, 448)]
  assert vit[1] / vit[0] == pytest.approx((785 / 197)**2)  # Quadratic.
  # The paper's Swin-T: 4.5 G (multiply-adds) at 224px.
  assert flops.count_flops(config, 224)['total'] / 2e9 == pytest.approx(4.49, abs=0.01)


def test_swin_matches_xla_cost_analysis():
  # XLA also counts the erf GELU, softmax and norms: 4.8% above the analytic count here.
  analytic = flops.count_flops(models.get_config('Swin-T_4_7'), 224)['total']
  assert flops.xla_flops('Swin-T_4_7', 224) == pytest.approx(analytic, rel=0.06)


def test_sizes_table(capsys):
  assert cli.call(flops, ['flops', '--model=ViT-B_16', '--also=Swin-B_4_7', '--sizes=224,448']) == 0
  out = capsys.readouterr().out
  assert 'ViT-B_16         224     196            1.431' in out
  assert 'Swin-B_4_7       448   12544' in out
  assert cli.call(flops, ['flops', '--sizes=224,x']) == 1
  assert 'positive pixel counts' in capsys.readouterr().err


def test_cli(capsys):
  assert cli.call(flops, ['flops', '--model=ViT-B_16', '--image=224']) == 0
  out = capsys.readouterr().out
  assert '35.1277 GFLOP' in out and 'image side ×2' in out and '15.88' in out
  assert cli.call(flops, ['flops', '--model=R50+ViT-B_16', '--image_size=384']) == 0
  assert 'resnet' in capsys.readouterr().out
  assert cli.call(flops, ['flops']) == 0  # The flags of the calls before are not kept.
  assert capsys.readouterr().out.startswith('ViT-B_16 at 224x224, 1000 classes')


def test_help_of_the_entry_point_lists_the_tools_own_flags():
  """`python -m vit_jax.flops --help`: the docstring, then flops' flags (absl's key flags)."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run([sys.executable, '-m', 'vit_jax.flops', '--help'], cwd=root,
                        capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, JAX_PLATFORMS='cpu'))
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.startswith('Analytic forward FLOPs')
  listed = proc.stdout.split('\nflags:\n')[1]
  for flag in ('model', 'image', 'image_size', 'num_classes', 'sizes', 'also', '[no]xla'):
    assert f'  --{flag}:' in listed, flag
  assert '  --checkpoint:' in listed  # Counts the model a checkpoint holds.


@pytest.mark.parametrize('args, message', [
    (['--model=ViT-Q'], 'Unknown model'),
    (['--model=Mixer-B_16'], 'Mixer'),
    (['--model=ResNet-50'], 'ResNet-50 is a ResNet model'),
    (['--image=0'], 'positive'),
    (['stray'], 'Unexpected arguments'),
])
def test_cli_errors(args, message, capsys):
  assert cli.call(flops, ['flops', *args]) == 1
  err = capsys.readouterr().err
  assert err.startswith('flops: error:') and message in err
