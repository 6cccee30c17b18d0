"""Places of a torchvision ``VisionTransformer``: every encoder block's input and the input of ``encoder.ln``.

The stream entering ``encoder.layers[i]`` (``encoder.layers.i.in``; the first is the patch embedding plus the
position embedding) and the one leaving the last block before the final LayerNorm (``encoder.ln.in``), one row per
token (the ``linear`` tangent family), as docs/design.md, section "Insertion candidates", counts a decoder's. A
zero-output block goes into the ``encoder.layers`` ``nn.Sequential`` before block ``i``, or at its end.
"""

from __future__ import annotations

from torch import nn
from torchvision.models import VisionTransformer

from common.models.places.registry import Place, PlaceRule, register_places


def vit_places(model: nn.Module) -> list[Place]:
    layers = model.encoder.layers
    places = [Place(f"encoder.layers.{i}.in", block, layers, i) for i, block in enumerate(layers)]
    places.append(Place("encoder.ln.in", model.encoder.ln, layers, len(layers), head=True))
    return places


RULE = register_places(
    PlaceRule("torchvision VisionTransformer", lambda m: isinstance(m, VisionTransformer), vit_places)
)
