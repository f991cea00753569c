"""What a family's FLOPs counter is (`FlopsCounter`) and the convolution count the counters
share; each family's counter lives in its folder (`families/<name>/flops.py`, `COUNTER`), named
by its record, and `tools.flops` runs it (no jax here).
"""

import dataclasses
import math
from typing import Any, Callable, Dict, Tuple


def conv_flops(out_hw: Tuple[int, int], kernel: Tuple[int, int], cin: int, cout: int) -> int:
  return 2 * out_hw[0] * out_hw[1] * kernel[0] * kernel[1] * cin * cout


def strided(hw: Tuple[int, int], stride: int) -> Tuple[int, int]:
  """Output size of a SAME-padded stride-`stride` conv or pool."""
  return math.ceil(hw[0] / stride), math.ceil(hw[1] / stride)


@dataclasses.dataclass(frozen=True)
class FlopsCounter:
  """How `flops` counts one family (a family's record names its counter).

  Attributes:
    count: (model config, image side, classes) → FLOPs by part (keys from `PARTS`; a family
      without attention has no 'attention': its doubling table shows 0 and nan) + 'total'.
    doubled: (unlocked model config copy, 'hidden size' or 'depth') → doubles it in place.
    tokens: (model config, image side) → the tokens the `--sizes` table shows.
  """

  count: Callable[[Any, int, int], Dict[str, int]]
  doubled: Callable[[Any, str], None]
  tokens: Callable[[Any, int], int]
