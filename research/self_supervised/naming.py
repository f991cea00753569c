"""The names of the measurement's fine-tuning steps, shared by `measure` (which writes
RESULTS/NAME.json) and `report` (which reads them)."""


def finetune_name(start: str, pct: str, seed: int = 0) -> str:
  """'ft_mae_p1', 'scratch_p100', 'ft_sup_p5_s2': slice (seed) 0 unsuffixed, as first run."""
  name = f'scratch_p{pct}' if start == 'scratch' else f'ft_{start}_p{pct}'
  return f'{name}_s{seed}' if seed else name
