"""Regional compilation: ``torch.compile`` of each repeated block, not of the whole model (issue 33, item 2).

A model whose repeated blocks sit in ``model.blocks`` (an ``nn.ModuleList``: the ResNet's ``ResidualBlock``, the
GPT's ``Block``; the same list FSDP2 shards) has every block's ``forward`` compiled, and its stem, head and
embeddings run eagerly. Dynamo caches compiled code per code object and takes a block's parameters as graph
inputs (it inlines ``nn.Module`` calls): every block of one type (its shapes and strides) shares one graph, so
the compile work of a run is that of the model's *block types*, whatever its depth. The CIFAR ResNet has at
most five (the stride-1 blocks of stages 1, 2 and 3, the two downsampling blocks; every N >= 3 has all five,
N = 0 three), the GPT one.

Graphs per block type: one per input shape and mode, training and evaluation (eval mode under ``no_grad``): the
training batch, each evaluation batch size and a partial last evaluation batch. Shapes stay static
(``automatic_dynamic_shapes`` off for the run: dynamo would otherwise make a dimension dynamic at its first
change, here the spatial size from one stage to the next): static shapes give the fastest kernels and one
``cudnn.benchmark`` choice per shape, and the count is a product of block types and batch shapes, not of
whichever type happened to compile first. Dynamo keeps at most ``recompile_limit`` versions of one function
(8 by default), and all blocks of a type share ``ResidualBlock.forward``: a ResNet needs five types x (training
batch, evaluation batch, partial evaluation batch) = 15 or more, so :data:`RECOMPILE_LIMIT` raises the limit
for the duration of a run only (``torch._dynamo.config.patch``), a bound that does not depend on the depth. A
model without ``blocks`` (a toy model of the tests) is compiled whole, as before.

Every run starts from a fresh compiler state (``torch.compiler.reset()``), so that its compile counts, and
what runs compiled, do not depend on the runs before it in the same process (an inline sweep). The counts of
a run (dynamo's ``counters``, differences over the run) are :meth:`Compilation.counts`, recorded in
the summary of :func:`common.training.loop.train` as ``compile``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
import torch._dynamo
from torch import nn
from torch._dynamo.utils import counters

RECOMPILE_LIMIT = 32  # versions of one block's forward: 5 ResNet block types x up to 6 batch shapes
COUNTED = (("frames", "ok"), ("frames", "total"), ("stats", "unique_graphs"), ("stats", "calls_captured"))


def repeated_blocks(model: nn.Module) -> nn.ModuleList | None:
    """``model.blocks`` when it is the model's list of repeated blocks (an ``nn.ModuleList``), else None."""
    blocks = getattr(model, "blocks", None)
    return blocks if isinstance(blocks, nn.ModuleList) and len(blocks) > 0 else None


def _snapshot() -> dict[tuple[str, str], int]:
    return {key: counters[key[0]][key[1]] for key in COUNTED}


@dataclass
class Compilation:
    """What one run compiles: its regions (the blocks compiled in place) or the whole model, and the counts."""

    enabled: bool
    blocks: list[nn.Module] = field(default_factory=list)  # empty: the whole model is compiled (or nothing)
    start: dict = field(default_factory=_snapshot)
    end: dict | None = None
    options: dict = field(default_factory=dict)  # torch.compile's keyword arguments for each block

    def add_block(self, block: nn.Module) -> None:
        """Compile ``block`` in place as the others (a block inserted into a growing run: common.training.growing)."""
        if self.mode == "regional":
            block.forward = torch.compile(block.forward, **self.options)
            self.blocks.append(block)

    @property
    def mode(self) -> str:
        return "off" if not self.enabled else "regional" if self.blocks else "whole"

    def forward(self, wrapped: Callable) -> Callable:
        """The training forward: ``wrapped`` (the model, DDP-wrapped where distributed) itself when its blocks
        are compiled in place (or nothing is compiled), else ``torch.compile(wrapped)``."""
        return torch.compile(wrapped) if self.mode == "whole" else wrapped

    def counts(self) -> dict | None:
        """``{"mode", "regions", "frames", "frames_not_compiled", "graphs", "ops"}`` of the run so far (None: off).

        ``frames``: frames dynamo compiled; ``frames_not_compiled``: frames it gave up on (a limit reached,
        an error): those ran eagerly; ``graphs``: distinct graphs; ``ops``: operations captured into them, the
        size of the compile work. ``regions``: the blocks compiled in place (0: the whole model).
        """
        if not self.enabled:
            return None
        now = self.end or _snapshot()
        diff = {key: now[key] - self.start[key] for key in COUNTED}
        frames = diff["frames", "ok"]
        return {
            "mode": self.mode,
            "regions": len(self.blocks),
            "frames": frames,
            "frames_not_compiled": diff["frames", "total"] - frames,
            "graphs": diff["stats", "unique_graphs"],
            "ops": diff["stats", "calls_captured"],
        }


@contextlib.contextmanager
def compiled(model: nn.Module, enabled: bool, backend: str | None = None) -> Iterator[Compilation]:
    """For the duration (a run's training rounds): with ``enabled``, a fresh compiler state, the recompile limit
    at :data:`RECOMPILE_LIMIT`, static shapes and every block of :func:`repeated_blocks` compiled in place;
    afterwards the blocks are eager again (the final evaluation, the probe and growth see the plain model) and
    the counts are kept.

    ``torch.compile`` is looked up at each call, so a test's ``monkeypatch`` of it (the ``eager`` backend) applies;
    ``backend``: torch.compile's (None: its default, inductor), for a benchmark that times the ``eager`` one.
    """
    if not enabled:
        yield Compilation(False)
        return
    torch.compiler.reset()
    blocks = repeated_blocks(model)
    options = {"backend": backend} if backend else {}
    compilation = Compilation(True, list(blocks) if blocks is not None else [], options=options)
    with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT, automatic_dynamic_shapes=False):
        for block in compilation.blocks:
            block.forward = torch.compile(block.forward, **options)  # an instance attribute over the class's forward
        try:
            yield compilation
        finally:
            for block in compilation.blocks:
                vars(block).pop("forward", None)
            compilation.end = _snapshot()
