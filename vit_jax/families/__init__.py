"""The model families: one module each in this package, one line each in `FAMILIES`.

A family's module (`families/<name>.py`) declares everything the package does differently per
family: its preset defaults (`EXTRAS`), its token geometry, its `runlocal` size, what it can do
(`resnet_root`, `augreg`, `masked_pretraining`, `timm_vit`) and by name the pieces that live in
the layer that owns them: its Flax module (models), the reader that describes its files from
their shapes (weights) and its analytic FLOPs counter (tools). This package is the lowest layer
(no jax, no other vit_jax import): a name is resolved by the layer that owns the named object
(`models.get_model`, `weights.architecture.architecture`, `tools.flops.count_flops`), never
here, so no import runs back up. docs/architecture.md, "Model families", shows the record.
"""

from typing import Dict

from vit_jax.families import hybrid
from vit_jax.families import mixer
from vit_jax.families import resnet
from vit_jax.families import swin
from vit_jax.families import vit
from vit_jax.families.record import Family, resolve

__all__ = ['Family', 'FAMILIES', 'resolve', 'VIT_EXTRAS', 'RESNET_EXTRAS', 'SWIN_EXTRAS']

VIT_EXTRAS = vit.EXTRAS
RESNET_EXTRAS = resnet.EXTRAS
SWIN_EXTRAS = swin.EXTRAS


def _register(*records: Family) -> Dict[str, Family]:
  return {record.name: record for record in records}


# The registry: a new family adds its module here and one line below.
FAMILIES: Dict[str, Family] = _register(
    vit.FAMILY,
    hybrid.FAMILY,
    mixer.FAMILY,
    swin.FAMILY,
    resnet.FAMILY,
)
