"""Places of a torchvision ResNet (``BasicBlock`` and ``Bottleneck`` stages ``layer1`` .. ``layer4``).

Every block's input (``layerK.i.in``; the first is the stem's output) and the state entering the head (the input of
``avgpool``), as docs/design.md, section "Insertion candidates", counts them for the repository's ResNets. A
zero-output block at ``layerK.i.in`` goes into the ``layerK`` ``nn.Sequential`` before block ``i``; at the head's
input it is appended to ``layer4``. Every state is an NCHW feature map (the ``conv3x3`` tangent family).

:func:`small_resnet` builds a real torchvision ``ResNet`` (its class, its forward) with narrower stages than its
fixed 64-512 channels: script 11's smoke preset and the tests probe it in seconds.
"""

from __future__ import annotations

from torch import nn
from torchvision.models import ResNet
from torchvision.models.resnet import BasicBlock

from common.models.places.registry import Place, PlaceRule, register_places

STAGES = ("layer1", "layer2", "layer3", "layer4")


def resnet_places(model: nn.Module) -> list[Place]:
    places = []
    for stage in STAGES:
        layer = getattr(model, stage)
        places += [Place(f"{stage}.{i}.in", block, layer, i) for i, block in enumerate(layer)]
    last = getattr(model, STAGES[-1])
    places.append(Place("avgpool.in", model.avgpool, last, len(last), head=True))
    return places


RULE = register_places(PlaceRule("torchvision ResNet", lambda m: isinstance(m, ResNet), resnet_places))


def small_resnet(widths=(8, 16, 32, 64), blocks=(1, 1, 1, 1), num_classes: int = 10) -> ResNet:
    """A torchvision ``ResNet`` of ``BasicBlock`` stages of ``widths`` channels (``blocks`` blocks each), random weights.

    ``ResNet.__init__`` fixes the widths at 64, 128, 256 and 512; its stem, stages and head are rebuilt here with
    its own ``_make_layer``, so the model is a torchvision ResNet in every respect but its widths.
    """
    model = ResNet(BasicBlock, list(blocks), num_classes=num_classes)
    model.inplanes = widths[0]
    model.conv1 = nn.Conv2d(3, widths[0], kernel_size=7, stride=2, padding=3, bias=False)
    model.bn1 = model._norm_layer(widths[0])
    for k, (stage, width, n) in enumerate(zip(STAGES, widths, blocks, strict=True)):
        setattr(model, stage, model._make_layer(BasicBlock, width, n, stride=1 if k == 0 else 2))
    model.fc = nn.Linear(widths[-1] * BasicBlock.expansion, num_classes)
    return model
