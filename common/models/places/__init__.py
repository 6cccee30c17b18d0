"""Where a model's residual stream can take a new block: one small rule per model family, registered here.

A *place* is a state of the residual stream, named by the module it enters (the probe reads it with a forward
pre-hook, as :class:`common.models.candidates.Candidate` does), with where a zero-output block would go to sit in
front of that module: ``container`` (an ``nn.Sequential`` or ``nn.ModuleList`` that the forward pass runs in order)
and ``position`` in it (``len(container)`` appends). A place with no container can be probed but not grown into.

Each model family's rule sits in its own file beside this one and registers itself with :func:`register_places`
(as Opacus registers one per-sample-gradient rule per layer type): ``torchvision_resnet`` (every block's input and
the input of ``avgpool``), ``torchvision_vit`` (every encoder layer's input and the input of ``encoder.ln``) and
``hf_decoder`` (every decoder layer's input and the final norm's input, through
:func:`common.models.hf_decoder.find_decoder_layers`). :func:`places_for` answers ``places="auto"``; a model that no
rule knows is refused with a sentence saying to pass the list of its blocks (:func:`places_of_modules`).
"""

from __future__ import annotations

from common.models.places import hf_decoder, torchvision_resnet, torchvision_vit  # the rules: each registers itself
from common.models.places.registry import (
    PLACE_RULES,
    Place,
    PlaceRule,
    in_sequence,
    modules_named,
    places_for,
    places_of_modules,
    register_places,
    rule_for,
)

__all__ = [
    "modules_named",
    "PLACE_RULES",
    "Place",
    "PlaceRule",
    "hf_decoder",
    "in_sequence",
    "places_for",
    "places_of_modules",
    "register_places",
    "rule_for",
    "torchvision_resnet",
    "torchvision_vit",
]
