"""Standard zero-output blocks and their tangent features, one rule per block family (docs/design.md).

A standard zero-output block at candidate ``l`` is ``z -> z + h_l(z)`` with
``h_l(z) = V_l psi_l(z; U_l)``: ``U_l`` random but fixed by the protocol (seeded from the run
seed and ``l``, :func:`protocol_seed`), ``V_l = 0`` at insertion, so the block is the identity
pointwise. At ``V_l = 0`` only ``V_l`` moves the output to first order (App. F, "tangent-space
reduction"), so the residual tangent space is ``{Psi W}``: the span of the tangent features
``Psi`` (one row per row unit, ``k`` columns) times any ``k x d`` matrix ``W``.

Each family is a :class:`TangentFamily` in :data:`TANGENT_FAMILIES` (one rule per family, as
Opacus registers one per-sample-gradient rule per layer type). A family says

- how to build the block for a stream of width ``d`` (``make_block``);
- how a state-shaped tensor (``z_l`` or ``G = dL/dz_l``) becomes rows (``state_rows``);
- how the output of ``psi_l`` becomes the tangent-feature rows ``Psi`` (``feature_rows``),
  row-aligned with ``state_rows``, so that ``C_l = Psi^T G`` is ``dL/dV_l`` at ``V_l = 0``.

Families
--------
``conv3x3`` (ResNet states, ``(B, C, H, W)``): ``psi = relu(bn(conv3x3_U(z)))`` with ``C``
channels, and ``V`` a bias-free 3x3 conv (stride 1, padding 1) ``C -> C`` initialised to zero,
with **no BatchNorm after V** (a BN after ``V`` in eval mode would add its shift
``beta - mu * gamma / sigma`` and break the zero output unless frozen at identity, which is the
same as having none). The BN inside ``psi`` is freshly initialised (running mean 0, variance 1,
identity affine) and used in the model's mode: in eval mode ``psi = relu(conv_U(z) /
sqrt(1 + eps))``, a fixed positive rescaling that leaves the tangent space unchanged.
Rows are image-position pairs ``(b, h, w)``; ``Psi`` is the im2col patch of ``psi`` at that
position (zero padding included), ``k = 9 C`` columns ordered like ``V.weight.reshape(C, -1)``.

``linear`` (token or vector states, ``(B, T, d)`` or ``(B, d)``): ``psi = gelu(U(layer_norm(z)))`` with
``m = expansion * d`` hidden features, and ``V`` a bias-free ``Linear(m, d)`` initialised to
zero (a decoder MLP block whose output projection is ``V``). Rows are tokens (every leading
index); ``Psi`` is the hidden feature vector, ``k = m``.

A state of another layout is refused with a sentence naming the family that fits
(:meth:`TangentFamily.check_state`, called where a family first sees ``z_l``): ``linear`` on a 4-D map would
otherwise read the image width as ``d``, and ``conv3x3`` on token states fail deep inside a convolution.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import skip_init

LINEAR_EXPANSION = 4  # hidden width of the linear family's psi: m = 4 d (GPT-2's MLP ratio)


def protocol_seed(seed: int, index: int) -> int:
    """The seed of ``U_l`` for candidate ``index`` under run seed ``seed`` (fixed by the protocol).

    A hash, so that neighbouring candidates and seeds get unrelated generators.
    """
    digest = hashlib.sha256(f"tangent-U:{int(seed)}:{int(index)}".encode()).hexdigest()
    return int(digest[:15], 16)


class ZeroOutputBlock(nn.Module):
    """``z -> z + V(psi(z))`` with ``V = 0`` at insertion: the standard zero-output block (docs/design.md, section
    "Zero-output block and tangent space").

    ``terminal`` is the bias-free layer whose weight is the block's terminal weights ``V_l`` (zero
    at insertion); ``psi`` holds the fixed ``U_l``. ``family`` names the :class:`TangentFamily` that
    built it; :meth:`tangent_features` returns ``Psi``, the rows of ``psi(z)`` that ``V`` acts on.
    """

    def __init__(self, psi: nn.Module, terminal: nn.Module, family: str) -> None:
        super().__init__()
        self.psi = psi
        self.terminal = terminal
        self.family = family

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z + self.terminal(self.psi(z))

    def tangent_features(self, z: torch.Tensor) -> torch.Tensor:
        """``Psi``: (rows, k) tangent features of this block at state ``z`` (row-aligned with ``G``)."""
        TANGENT_FAMILIES[self.family].check_state(z)
        return TANGENT_FAMILIES[self.family].feature_rows(self.psi(z))

    @torch.no_grad()
    def set_terminal_projection(self, w: torch.Tensor) -> None:
        """Set ``V`` from a ``(k x d)`` matrix ``W`` in ``Psi``-row coordinates: the block's output rows become ``Psi W``.

        Both families store ``V.weight`` as ``(d, k)`` up to a reshape (``(d, C, 3, 3)`` for conv3x3,
        whose ``Psi`` columns follow ``V.weight.reshape(d, -1)``), so ``V.weight = W^T`` reshaped.
        """
        weight = self.terminal.weight
        if tuple(w.shape) != (weight[0].numel(), weight.shape[0]):
            raise ValueError(f"W must be (k, d) = ({weight[0].numel()}, {weight.shape[0]}), got {tuple(w.shape)}")
        weight.copy_(w.T.reshape(weight.shape).to(weight.dtype))


@dataclass(frozen=True)
class TangentFamily:
    """One residual-block family: how to build its zero-output block and read its tangent features."""

    name: str
    make_block: Callable[[int, torch.Generator], ZeroOutputBlock]  # (width d, generator) -> block
    state_rows: Callable[[torch.Tensor], torch.Tensor]  # state-shaped (z or G) -> (rows, d)
    feature_rows: Callable[[torch.Tensor], torch.Tensor]  # psi output -> Psi, (rows, k)
    width: Callable[[torch.Tensor], int]  # d: coordinates of z_l per row unit
    feature_dim: Callable[[int], int]  # k as a function of d
    rows_per_example: Callable[[torch.Tensor], int]  # row units per example (H*W, T, 1)
    # Optional structured route: (psi output, G, chunk_elements=...) -> (P, X) in float64,
    # used where gram_supported(psi).
    gram: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None
    gram_supported: Callable[[torch.Tensor], bool] = lambda psi: False
    # Optional rows x rows route: psi output (float64) -> K = Psi Psi^T (n x n), without the n x k rows.
    row_gram: Callable[[torch.Tensor], torch.Tensor] | None = None
    state_dims: tuple[int, ...] = ()  # the tensor dimensions a state z_l may have (empty: any)
    layout: str = ""  # those layouts in words, for the refusal of another

    def check_state(self, z: torch.Tensor, candidate: str | None = None) -> None:
        """Refuse a state ``z_l`` of the wrong layout with a plain sentence that names the family that fits, before
        ``width`` or the rows read a wrong axis (a 4-D map read by ``linear`` would take the image width for ``d``)."""
        if not self.state_dims or z.dim() in self.state_dims:
            return
        fits = [f.name for f in TANGENT_FAMILIES.values() if z.dim() in f.state_dims]
        where = f"candidate {candidate!r} gives" if candidate is not None else "got"
        hint = f": name family={fits[0]!r}" if fits else ""
        raise ValueError(f"the {self.name} family needs {self.layout}; {where} shape {tuple(z.shape)}{hint}")


TANGENT_FAMILIES: dict[str, TangentFamily] = {}


def register_family(family: TangentFamily) -> TangentFamily:
    """Add a family to :data:`TANGENT_FAMILIES` (a new family is a new rule, not a new branch)."""
    if family.name in TANGENT_FAMILIES:
        raise ValueError(f"tangent family {family.name!r} is already registered")
    TANGENT_FAMILIES[family.name] = family
    return family


def get_family(name: str) -> TangentFamily:
    try:
        return TANGENT_FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown tangent family {name!r}; known: {', '.join(sorted(TANGENT_FAMILIES))}") from None


def candidate_family(candidate, family: str | None = None) -> TangentFamily:
    """The one rule that chooses a candidate's tangent family, for the probe and for insertion alike.

    An explicit ``family`` wins; otherwise the family the model declared for the candidate
    (``candidate.family``, set in its ``candidates()``: ``conv3x3`` for ResNet feature maps,
    ``linear`` for token states).
    """
    return get_family(family or candidate.family)


# ----------------------------------------------------------------------------- conv3x3
def _conv3x3_block(channels: int, generator: torch.Generator) -> ZeroOutputBlock:
    # skip_init: no default initialisation to overwrite (nothing drawn from the global generator either)
    conv_u = skip_init(nn.Conv2d, channels, channels, 3, padding=1, bias=False)
    with torch.no_grad():  # U_l: Kaiming normal (fan-out, ReLU gain), as ResNet._init_weights, seeded
        std = (2.0 / (channels * 9)) ** 0.5
        conv_u.weight.copy_(torch.randn(conv_u.weight.shape, generator=generator) * std)
    psi = nn.Sequential(conv_u, nn.BatchNorm2d(channels), nn.ReLU())
    terminal = skip_init(nn.Conv2d, channels, channels, 3, padding=1, bias=False)  # V_l
    nn.init.zeros_(terminal.weight)
    return ZeroOutputBlock(psi, terminal, "conv3x3")


def _conv_state_rows(t: torch.Tensor) -> torch.Tensor:
    return t.permute(0, 2, 3, 1).reshape(-1, t.shape[1])  # (B, C, H, W) -> (B*H*W, C)


def _conv_feature_rows(psi: torch.Tensor) -> torch.Tensor:
    # im2col: (B, C, H, W) -> (B, C*9, H*W) -> (B*H*W, C*9); column order (c, i, j) = V.weight's.
    patches = F.unfold(psi, kernel_size=3, padding=1)
    return patches.transpose(1, 2).reshape(-1, patches.shape[1])


def _conv_gram_supported(psi: torch.Tensor) -> bool:
    return psi.shape[2] >= 4 and psi.shape[3] >= 4  # smaller maps: the pieces would overlap


GRAM_CHUNK_ELEMENTS = 1 << 20  # float64 elements per padded map chunk (8 MiB: reused, not re-mapped)
_OFFSETS = [(i - 1, j - 1) for i in range(3) for j in range(3)]  # V.weight's (i, j) order
_SHIFTS = [(dy, dx) for dy in range(3) for dx in range(-2, 3) if dy > 0 or dx >= 0]  # 13; the rest by symmetry


def _conv_gram(
    psi: torch.Tensor, g: torch.Tensor, *, chunk_elements: int = GRAM_CHUNK_ELEMENTS
) -> tuple[torch.Tensor, torch.Tensor]:
    """``P = Psi^T Psi`` and ``X = Psi^T G`` (float64) of the im2col rows, without forming them.

    ``Psi``'s column ``(c, o)`` at position ``p`` is ``psi_pad[c, p + o]`` for the nine offsets
    ``o``, so block ``(o, o')`` of ``P`` is a sum of ``psi[q] psi[q + delta]^T`` (``delta = o' - o``)
    over the overlap ``R_delta`` of the image with its shift, less its first/last row where
    ``q - o`` leaves the image (only when ``delta_y = 0``) and its first/last column (only when
    ``delta_x = 0``). With the maps stored zero-padded (2 columns right, 2 rows below) and
    flattened, the overlap sum is one product of two shifted views (no copies); the edges are
    small products. P is symmetric, so 13 shifts give all 81 blocks: 13 instead of 81 ``n C^2``
    multiply-adds; ``X`` is nine shifted products. Images go through in chunks of about
    ``chunk_elements`` padded float64 values. Exact in exact arithmetic (the tests compare with
    the im2col rows). Needs maps of at least 4 x 4 (:func:`_conv_gram_supported`).
    """
    if not _conv_gram_supported(psi):
        raise ValueError(f"the structured conv3x3 Gram needs maps of at least 4 x 4, got {tuple(psi.shape)}")
    c, h, w = psi.shape[1:]
    full, xs, row_sums, col_sums, corners = _conv_sums(psi, g, chunk_elements)
    p_blocks = _conv_p_blocks(full, row_sums, col_sums, corners, h, w)
    return p_blocks.reshape(9 * c, 9 * c), xs.permute(2, 0, 1).reshape(9 * c, g.shape[1])


def _conv_sums(psi: torch.Tensor, g: torch.Tensor, chunk_elements: int) -> tuple[torch.Tensor, ...]:
    """The sums :func:`_conv_gram` assembles ``P`` and ``X`` from, over chunks of images (float64): per shift
    ``delta`` of :data:`_SHIFTS` the sum over the overlap ``R_delta``; per offset ``o`` ``sum_p G[p] psi[p + o]^T``;
    the edge rows (``delta_y = 0``) and columns (``delta_x = 0``) of ``R_delta``, and the four corners (``delta = 0``)."""
    c, h, w = psi.shape[1:]
    d, row = g.shape[1], w + 2
    f64 = {"dtype": torch.float64, "device": psi.device}
    full = torch.zeros(len(_SHIFTS), c, c, **f64)  # sum over R_delta
    xs = torch.zeros(9, d, c, **f64)  # sum_p G[p] psi[p + o]^T
    row_sums = torch.zeros(3, 2, c, c, **f64)  # delta = (0, dx): rows 0 and H - 1 of R_delta
    col_sums = torch.zeros(3, 2, c, c, **f64)  # delta = (dy, 0): columns 0 and W - 1 of R_delta
    corners = torch.zeros(2, 2, c, c, **f64)  # delta = 0: the four corner pixels
    per_chunk = max(1, chunk_elements // (max(c, d) * (h + 2) * row))
    for start in range(0, psi.shape[0], per_chunk):
        y = _padded_flat(psi[start : start + per_chunk])  # (C, M), M = B (H + 2) (W + 2)
        gg = _padded_flat(g[start : start + per_chunk])  # (d, M)
        for k, (oy, ox) in enumerate(_OFFSETS):
            xs[k] += _shifted_product(gg, y, oy * row + ox)
        for k, (dy, dx) in enumerate(_SHIFTS):
            full[k] += _shifted_product(y, y, dy * row + dx)
        grid = y.reshape(c, -1, h + 2, row)
        for i, r in enumerate((0, h - 1)):
            band = grid[:, :, r, :].reshape(c, -1)
            for dx in range(3):
                row_sums[dx, i] += _shifted_product(band, band, dx)
        for j, x in enumerate((0, w - 1)):
            band = grid[:, :, :, x].reshape(c, -1)
            for dy in range(3):
                col_sums[dy, j] += _shifted_product(band, band, dy)
        for i, r in enumerate((0, h - 1)):
            for j, x in enumerate((0, w - 1)):
                corners[i, j] += grid[:, :, r, x] @ grid[:, :, r, x].T
    return full, xs, row_sums, col_sums, corners


def _conv_p_blocks(
    full: torch.Tensor, row_sums: torch.Tensor, col_sums: torch.Tensor, corners: torch.Tensor, h: int, w: int
) -> torch.Tensor:
    """``P``'s 81 blocks ``(o, o')`` as ``(C, 9, C, 9)`` from the sums of :func:`_conv_sums`: each the overlap sum of
    its shift ``delta = o' - o`` less the edge rows and columns where ``q - o`` leaves the image (the corners added
    back), and its mirror block ``(o', o)`` the transpose."""
    c = full.shape[1]
    p_blocks = torch.empty(c, 9, c, 9, dtype=torch.float64, device=full.device)
    for k, (dy, dx) in enumerate(_SHIFTS):
        hy, lx, hx = h - dy, max(0, -dx), min(w, w - dx)
        for a, (oy, ox) in enumerate(_OFFSETS):
            if (oy + dy, ox + dx) not in _OFFSETS:
                continue
            b_index = _OFFSETS.index((oy + dy, ox + dx))
            # R(o, o') drops R_delta's first row/column when o > lo, its last when H + o < hi.
            drop_y = (oy > 0, h + oy < hy)
            drop_x = (ox > lx, w + ox < hx)
            block = full[k].clone()
            for i in range(2):
                if drop_y[i]:
                    block -= row_sums[dx, i]  # only happens for dy = 0, dx >= 0
                if drop_x[i]:
                    block -= col_sums[dy, i]  # only happens for dx = 0
                for j in range(2):
                    if drop_y[i] and drop_x[j]:
                        block += corners[i, j]  # only for delta = 0
            p_blocks[:, a, :, b_index] = block
            p_blocks[:, b_index, :, a] = block.T
    return p_blocks


def _conv_row_gram(psi: torch.Tensor) -> torch.Tensor:
    """``K = Psi Psi^T`` (n x n, ``n = B H W`` im2col rows) of maps of at least 4 x 4 without the rows (smaller maps:
    the rows' product). With the maps zero-padded by one pixel and flattened (``M = B (H + 2) (W + 2)`` positions),
    row ``p`` of ``Psi`` is ``psi_pad[:, p + o]`` over the nine offsets ``o``, so ``K[p, q] = sum_o A[p + o, q + o]``
    with ``A = psi_pad^T psi_pad`` (M x M): products of ``C``-long columns, not ``9 C``-long rows (``(M / n)^2 / 9``
    of the work, ``M / n <= 2.25`` at 4 x 4), then nine shifted views summed. Exact in exact arithmetic (the tests
    compare it with the rows' product)."""
    b, c, h, w = psi.shape
    if h < 4 or w < 4:
        rows = _conv_feature_rows(psi)
        return rows @ rows.T
    flat = F.pad(psi, (1, 1, 1, 1)).transpose(0, 1).reshape(c, -1)  # (C, M)
    a = flat.T @ flat
    at = torch.arange
    real = ((at(b)[:, None, None] * (h + 2) + at(h)[None, :, None] + 1) * (w + 2) + at(w)[None, None, :] + 1).flatten()
    out = torch.zeros(real.numel(), real.numel(), dtype=psi.dtype, device=psi.device)
    for oy, ox in _OFFSETS:
        shifted = real.to(psi.device) + oy * (w + 2) + ox
        out += a[shifted][:, shifted]
    return out


def _shifted_product(a: torch.Tensor, b: torch.Tensor, shift: int) -> torch.Tensor:
    """``sum_t a[:, t] b[:, t + shift]^T`` over the valid ``t`` of two (rows, M) matrices (views, no copies)."""
    m = a.shape[1]
    return a[:, : m - shift] @ b[:, shift:].T if shift >= 0 else a[:, -shift:] @ b[:, : m + shift].T


def _padded_flat(t: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> float64 (C, B * (H + 2) * (W + 2)): zero-padded 2 columns right, 2 rows below.

    Shifting a real pixel by at most 2 rows down or 2 columns either way in the flattened index
    then lands on the right pixel or on a zero, never on another row's or image's pixel.
    """
    b, c, h, w = t.shape
    out = torch.empty(c, b, h + 2, w + 2, dtype=torch.float64, device=t.device)
    out[:, :, :h, :w] = t.transpose(0, 1)
    out[:, :, h:, :] = 0
    out[:, :, :h, w:] = 0
    return out.reshape(c, -1)


register_family(
    TangentFamily(
        name="conv3x3",
        gram=_conv_gram,
        gram_supported=_conv_gram_supported,
        row_gram=_conv_row_gram,
        make_block=_conv3x3_block,
        state_rows=_conv_state_rows,
        feature_rows=_conv_feature_rows,
        width=lambda z: int(z.shape[1]),
        feature_dim=lambda d: 9 * d,
        rows_per_example=lambda z: int(z.shape[2] * z.shape[3]),
        state_dims=(4,),
        layout="(batch, channels, height, width) feature maps",
    )
)


# ----------------------------------------------------------------------------- linear
def _linear_block(width: int, generator: torch.Generator) -> ZeroOutputBlock:
    hidden = LINEAR_EXPANSION * width
    u = skip_init(nn.Linear, width, hidden)
    with torch.no_grad():  # U_l: PyTorch's default Linear init, drawn from the protocol's generator
        bound = 1.0 / width**0.5
        u.weight.copy_(torch.rand(u.weight.shape, generator=generator) * 2 * bound - bound)
        u.bias.copy_(torch.rand(u.bias.shape, generator=generator) * 2 * bound - bound)
    psi = nn.Sequential(nn.LayerNorm(width), u, nn.GELU())
    terminal = skip_init(nn.Linear, hidden, width, bias=False)  # V_l
    nn.init.zeros_(terminal.weight)
    return ZeroOutputBlock(psi, terminal, "linear")


def _linear_rows(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, t.shape[-1])  # (..., d) -> (tokens, d)


register_family(
    TangentFamily(
        name="linear",
        make_block=_linear_block,
        state_rows=_linear_rows,
        feature_rows=_linear_rows,
        width=lambda z: int(z.shape[-1]),
        feature_dim=lambda d: LINEAR_EXPANSION * d,
        rows_per_example=lambda z: int(z[0].numel() // z.shape[-1]),
        state_dims=(2, 3),
        layout="(batch, width) vectors or (batch, tokens, width) token states",
    )
)


def make_zero_block(
    family: str, width: int, seed: int, index: int, *, like: torch.Tensor | None = None
) -> ZeroOutputBlock:
    """The protocol's zero-output block of ``family`` for candidate ``index`` of a width-``width`` stream.

    ``U_l`` is drawn in float32 on the CPU from :func:`protocol_seed` (so the same block comes
    out on every device and dtype), then moved to ``like``'s dtype and device.
    """
    generator = torch.Generator().manual_seed(protocol_seed(seed, index))
    block = get_family(family).make_block(width, generator)
    if like is not None:
        block = block.to(dtype=like.dtype, device=like.device)
    return block
