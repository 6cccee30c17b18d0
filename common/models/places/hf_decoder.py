"""Places of a Hugging Face causal LM: every decoder layer's input and the final norm's input.

The layer list and the norm are found by :func:`common.models.hf_decoder.find_decoder_layers` (GPT-NeoX, GPT-2,
Llama, Qwen2, Mistral, Phi): ``L + 1`` states of width ``d_model``, one row per token (the ``linear`` tangent family),
as :class:`common.models.hf_decoder.HFDecoder` declares its candidates. A decoder layer takes more than the state
(masks, positions), so no standard zero-output block goes into its list: such a model grows by a copied layer
whose output projections are zero (:func:`common.models.hf_decoder.insert_zero_layer`).
"""

from __future__ import annotations

from torch import nn
from transformers import PreTrainedModel

from common.models.hf_decoder import find_decoder_layers
from common.models.places.registry import Place, PlaceRule, register_places

GROW_NOTE = "a decoder layer takes more than the state; grow it with common.models.hf_decoder.insert_zero_layer"


def decoder_places(model: nn.Module) -> list[Place]:
    parts = find_decoder_layers(model)
    places = [Place(f"{parts.layers_path}.{i}.in", layer, note=GROW_NOTE) for i, layer in enumerate(parts.layers)]
    places.append(Place(f"{parts.norm_path}.in", parts.final_norm, head=True, note=GROW_NOTE))
    return places


RULE = register_places(PlaceRule("Hugging Face causal LM", lambda m: isinstance(m, PreTrainedModel), decoder_places))
