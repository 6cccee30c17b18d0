"""Insertion candidates (docs/design.md, section "Insertion candidates").

Every candidate ``l`` is a residual-stream state ``z_l`` where a shape-preserving block
``z -> z + h_l(z)`` fits. In every model family of this repository ``z_l`` is exactly the
*input of one module* (a residual block, or the head/final norm for the last state), so a
candidate is named by that module: a forward pre-hook on it sees ``z_l``. The model also
declares the candidate's tangent family. Candidates are fixed by the model's structure before
any gradient is looked at (the protocol).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True, eq=False)
class Candidate:
    """Candidate ``l``: the tensor entering ``module`` is the residual-stream state ``z_l``.

    ``family`` names the tangent family of the protocol's zero-output block at this candidate
    (``common.science.tangent.TANGENT_FAMILIES``): the probe's exact projection and
    ``common.science.growth.insert_zero_block`` both read it (``common.science.tangent.candidate_family``).
    """

    index: int
    name: str
    module: nn.Module
    family: str
