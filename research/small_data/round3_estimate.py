"""How long round 3's grid takes on 2 vCPUs, before any run: measured step times per model and
recipe, and the run time of each stage they give (docs/small_data_study.md, Round 3, Estimate).

  python -c "from research.small_data import round3_estimate as e; print(e.estimate_seconds(''))"
"""

from typing import Dict, Mapping, Tuple

from research.small_data import fashion_mnist_round3 as round3
from research.small_data import full_recipe_epochs
from research.small_data import select
from vit_jax import config_lib

# Seconds per training step (batch 128, evaluations included) measured in round 2
# (docs/study/results.jsonl: wall time / steps, mean over its runs; 2 vCPUs, 2026-11-25): ViT
# 0.135, ViT patch 4 (50 tokens) 0.338, hybrid at 32px 0.191, ResNet 0.359, Swin 0.391, the
# ViT with RandAugment + Mixup 0.145 and with the regularisation 0.164. Derived: the strong
# recipe adds both overheads (x1.29; the ResNet, without stochastic depth or dropout, only the
# augmentation's, x1.07); hybrid28 (50 tokens, as patch 4) is patch 4 plus the root's cost at
# 28px (0.056 at 32px, x(28/32)^2). Relative position embeddings cost x1.13 a ViT step (forward
# + backward of the study ViT at batch 128, 'learn' and 'relative' interleaved, 3 x 10 steps,
# 2026-11-26, this machine under other load).
_STRONG = (0.145 + 0.164 - 0.135) / 0.135
_HYBRID28 = 0.338 + (0.191 - 0.135) * (28 / 32)**2
RATES = {('vit', 'plain'): 0.135, ('vit', 'strong'): 0.135 * _STRONG,
         ('hybrid28', 'plain'): _HYBRID28, ('hybrid28', 'strong'): _HYBRID28 * _STRONG,
         ('resnet', 'plain'): 0.359, ('resnet', 'strong'): 0.359 * 0.145 / 0.135,
         ('swin', 'plain'): 0.391, ('swin', 'strong'): 0.391 * _STRONG}
POSEMB_FACTOR = {'relative': 1.13}
# Label-free pretraining of the patch-7 ViT, seconds per step of batch 256: 57 steps each of
# `configs/fashion_mnist_ssl.py:METHOD,stage1,patch=7`, 2026-11-27, beside the grid's runs on
# the same 2 vCPUs (MAE 19.5 s, MPP 28.6 s from the first step to the last).
SSL_RATES = {'mae': 19.5 / 57, 'mpp': 28.6 / 57}
SSL_CONFIG = 'configs/fashion_mnist_ssl.py'  # The config round3.ssl_runs' commands name.


def pretrain_steps(method: str) -> int:
  """Steps of a method's pretraining: its config's epochs over the 60k images (state.py)."""
  config = config_lib.load_config_module(SSL_CONFIG).get_config(f'{method},stage1,patch=7')
  return max(int(config.num_epochs * full_recipe_epochs.TRAIN_IMAGES // config.batch), 1)


def estimate_seconds(arg: str, rates: Mapping[Tuple[str, str], float] = RATES,
                     posemb_factor: Mapping[str, float] = POSEMB_FACTOR,
                     ssl_rates: Mapping[str, float] = SSL_RATES, budget_fraction: float = 0.5
                     ) -> Dict[str, float]:
  """Run time of each stage of round 3's `get_grid(arg)`, before any run: budgets are not known
  until the probes ran, so each arm's budget is taken as `budget_fraction` of its probe's steps.

  `rates`: seconds per step of (model, recipe); `posemb_factor`: a position embedding's step
  time relative to 'learn' (1 where absent); `ssl_rates`: seconds per pretraining step.
  """
  opts, runlocal = round3.parse(arg)
  seeds, lrs = int(opts['seeds']), len(select.parse_values(opts['lrs'], 'lrs'))
  out = dict(probe=0., sweep=0., seeds=0., posemb=0., ssl=0., full=0.)
  if 'full' in opts['parts'].split('+') and not runlocal:
    out['full'] = full_recipe_epochs.estimate_seconds(opts['full_epochs'])
  for arm in round3.arms(runlocal, opts['parts'], opts['models']):
    sweep = lrs * len(round3.weight_decays(arm, opts['wds']))
    steps = round3.probe_steps(arm, opts)
    rate = rates[arm[:2]]
    budget = budget_fraction * steps
    out['probe'] += rate * steps
    out['sweep'] += rate * budget * sweep
    out['seeds'] += rate * budget * (seeds - 1)
    if (arm[:2] == ('vit', 'plain') and arm[2] in round3.POSEMB_PCTS
        and 'posemb' in opts['parts'].split('+')):
      out['posemb'] += sum(rate * posemb_factor.get(pe, 1.) * budget * seeds
                           for pe in round3.POSEMBS)
    if arm == round3.SSL_ARM and 'ssl' in opts['parts'].split('+') and not runlocal:
      out['ssl'] += sum(ssl_rates[m] * pretrain_steps(m) + rate * budget * seeds
                        for m in round3.SSL)
  return out
