"""The model families: one folder each in this package, one line each in `FAMILIES`.

A family's folder (`families/<name>/`) holds everything the package does differently for it.
Its `__init__.py` is the record (`FAMILY`): its presets (`presets.py`) and their defaults
(`EXTRAS`), token geometry, the `runlocal` size, what it can do (`resnet_root`, `augreg`,
`masked_pretraining`, `timm_vit`), and the dotted names of the pieces beside it: `model.py`
(its Flax module), `shapes.py` (the reader that describes its files from their shapes),
`flops.py` (its analytic FLOPs counter) and, where timm has the family, `timm.py` (timm's names
both ways). The records and this registry import no jax and no other vit_jax module (configs
read them), so a piece is named, not imported, here: the layer that uses it imports it by
that name (`models.get_model`, `weights.architecture.architecture`, `tools.flops.count_flops`);
`from vit_jax.families.swin.model import SwinTransformer` reaches it directly.
`.importlinter` keeps a folder's pieces in their layers. docs/architecture.md, "Model
families", shows the record.
"""

from typing import Dict

from vit_jax.families import eva
from vit_jax.families import hybrid
from vit_jax.families import mixer
from vit_jax.families import resnet
from vit_jax.families import swin
from vit_jax.families import vit
from vit_jax.families.record import Family, resolve

__all__ = ['Family', 'FAMILIES', 'resolve', 'VIT_EXTRAS', 'RESNET_EXTRAS', 'SWIN_EXTRAS',
           'EVA_EXTRAS']

VIT_EXTRAS = vit.EXTRAS
RESNET_EXTRAS = resnet.EXTRAS
SWIN_EXTRAS = swin.EXTRAS
EVA_EXTRAS = eva.EXTRAS


def _register(*records: Family) -> Dict[str, Family]:
  return {record.name: record for record in records}


# The registry: a new family adds its module here and one line below.
FAMILIES: Dict[str, Family] = _register(
    vit.FAMILY,
    hybrid.FAMILY,
    mixer.FAMILY,
    swin.FAMILY,
    resnet.FAMILY,
    eva.FAMILY,
)
