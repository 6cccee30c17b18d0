"""App. H.1's matched insertion (common/experiments/matched_insertion.py) against its exact first-order prediction.

Small random models in float64. The prediction is ``-alpha ||Pi G||^2 / n`` with ``G`` the
per-example gradient rows; the loss after inserting the fitted block differs from it by
``O(alpha^2)``, so ``measured / predicted - 1`` must shrink in proportion to ``alpha``.
"""

from __future__ import annotations

import copy
import math
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from common.experiments import matched_insertion_measure
from common.experiments.matched_insertion import (
    matched_insertion,
    resolve_candidates,
    summary_markdown,
    summary_rows,
)
from common.experiments.matched_insertion_measure import BELOW_PRECISION
from common.models.candidates import Candidate
from common.models.resnet import ResNet, ResNetConfig, extra_block_position
from common.presets.matched_insertion import PAPER_DEPTHS
from common.science.activations import activation_gradients, probe_mode
from common.science.gram import per_example_tangent_regression
from common.science.precision import math_mode
from common.science.tangent import make_zero_block
from common.training import long_run
from tests.helpers import CASES, MLPBlock, precision_flags

ROOT = Path(__file__).resolve().parents[2]


def one_pass(x, y, size):
    return lambda: [(x[i : i + size], y[i : i + size]) for i in range(0, x.shape[0], size)]


@pytest.mark.parametrize("kind", sorted(CASES))
def test_measured_change_tends_to_the_prediction_as_alpha_tends_to_zero(kind):
    model, x, y = CASES[kind](0, batch=8) if kind == "mlp" else CASES[kind](0, batch=4, size=8)
    index = 1
    rows = matched_insertion(model, one_pass(x, y, 4), index, [1e-1, 1e-3, 1e-4])
    errors = [abs(r["ratio"] - 1) for r in rows]
    assert all(r["predicted_change"] < 0 for r in rows)  # a descent direction: the gradient is not orthogonal
    assert errors[2] < 1e-4 and errors[2] < errors[1] < errors[0]
    # O(alpha^2) remainder: once alpha is small enough that no ReLU in the block's wake changes
    # side, the relative error falls tenfold per tenfold smaller alpha.
    assert errors[1] / errors[2] == pytest.approx(10, rel=0.2)
    # Linear in alpha; rel 1e-10 since each row's ||Pi g||^2 passes through eigh of the Gram matrix.
    assert rows[1]["predicted_change"] / rows[2]["predicted_change"] == pytest.approx(10, rel=1e-10)


@pytest.mark.parametrize("kind", sorted(CASES))
def test_fitting_plus_alpha_g_raises_the_loss_by_the_same_first_order_amount(kind):
    model, x, y = CASES[kind](1, batch=8) if kind == "mlp" else CASES[kind](1, batch=4, size=8)
    alpha = 1e-3
    [down] = matched_insertion(model, one_pass(x, y, 4), 0, [alpha])
    [up] = matched_insertion(model, one_pass(x, y, 4), 0, [-alpha])  # the block outputs +alpha Pi g
    assert down["measured_change"] < 0 < up["measured_change"]
    assert up["predicted_change"] == pytest.approx(-down["predicted_change"], rel=1e-10)  # two eigh solves of one P
    # The two differ only in the second-order term: their sum is O(alpha^2), tiny against either.
    assert abs(up["measured_change"] + down["measured_change"]) < 1e-2 * abs(down["measured_change"])


def test_float64_measurement_resolves_a_drop_that_float32_rounding_hides():
    model64, x, y = CASES["resnet"](3, batch=16, size=8)
    model, xb = copy.deepcopy(model64).float(), x.float()  # as trained: float32 weights and inputs
    batches = one_pass(xb, y, 4)
    resolved, vanishing = matched_insertion(model, batches, 1, [1e-8, 1e-22])

    def mean_loss_by_hand(net, dtype):  # float64 cross-entropy of the net's logits, summed over the examples
        with torch.no_grad():
            return sum(
                float(F.cross_entropy(net.eval()(a.to(dtype)).double(), b, reduction="sum")) for a, b in batches()
            ) / len(y)

    l64, l32 = mean_loss_by_hand(copy.deepcopy(model).double(), torch.float64), mean_loss_by_hand(model, torch.float32)
    assert resolved["train_loss_before"] == pytest.approx(l64, rel=1e-13) and resolved["loss_dtype"] == "float64"
    assert resolved["train_loss_before_float32"] == pytest.approx(l32, rel=1e-12)
    # The floors: float32 against float64 on the parent; two float64 passes in other batch orders differ by ulps.
    assert resolved["float32_gap"] == pytest.approx(abs(l32 - l64), rel=1e-4) and resolved["float32_gap"] > 1e-9
    eps = torch.finfo(torch.float64).eps
    assert resolved["float64_order_spread"] <= 16 * eps * l64
    assert resolved["measurement_floor"] == max(resolved["float64_order_spread"], eps * l64)
    # A predicted drop of ~3e-10: below the float32 floor, so the float32 reading gives no sign; the float64
    # reading is 1e4 floors away and equals the first-order prediction (O(alpha) remainder, float32 gradients).
    assert abs(resolved["predicted_change"]) < resolved["float32_gap"]
    assert resolved["measured_change_float32_precision"] == BELOW_PRECISION
    assert abs(resolved["measured_change_float32"]) <= resolved["float32_gap"]
    assert resolved["measured_change_precision"] == "measured"
    assert abs(resolved["measured_change"]) > 1e4 * resolved["measurement_floor"]
    assert resolved["ratio"] == pytest.approx(1.0, abs=1e-4)
    # Far below float64's floor too: reported as below precision, never as a sign (no ratio).
    assert (vanishing["measured_change_precision"], vanishing["ratio"]) == (BELOW_PRECISION, None)
    table = summary_markdown(
        summary_rows([{"rows": [{**r, "depth_n": 0, "depth_label": 8, "seed": 0} for r in (resolved, vanishing)]}])
    )
    assert table.count("| below precision |") == 3  # cells: float32 twice, float64 once


class IdentityHeadMLP(nn.Module):
    """``x -> tanh(stem(x)) -> block -> out``: the last candidate's state *is* the output, so a loss that is
    linear in the output makes ``g_i`` any target we like."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(5, 3)
        self.blocks = nn.ModuleList([MLPBlock(3)])
        self.out = nn.Identity()

    def forward(self, x):
        z = torch.tanh(self.stem(x))
        for block in self.blocks:
            z = block(z)
        return self.out(z)

    def candidates(self):
        return [Candidate(0, "block0.in", self.blocks[0], "linear"), Candidate(1, "out.in", self.out, "linear")]

    def candidate_width(self, index: int) -> int:
        return 3


def linear_loss(output, coefficients):
    """``mean_i <T_i, output_i>``: its per-example gradient at the output is exactly ``T_i``."""
    return (output * coefficients).sum(-1).mean()


def test_a_gradient_orthogonal_to_the_tangent_space_gives_no_first_order_change():
    torch.manual_seed(0)
    model = IdentityHeadMLP().double().eval()
    x = torch.randn(40, 5, dtype=torch.float64)  # 40 rows > k = 12 features: a proper complement exists
    with probe_mode(model):
        _, (z,), _ = activation_gradients(
            model, x, torch.zeros(40, 3, dtype=torch.float64), linear_loss, [model.candidates()[1]]
        )
    block = make_zero_block("linear", 3, 0, 1, like=z).eval()
    with torch.no_grad():
        psi = block.tangent_features(z)
    projector = psi @ torch.linalg.pinv(psi)
    raw = torch.randn(40, 3, dtype=torch.float64)
    orthogonal = raw - projector @ raw
    assert float(orthogonal.norm()) > 0.5  # the gradient is far from zero: the test is not vacuous
    [generic] = matched_insertion(model, lambda: [(x, raw)], 1, [1e-2], loss_fn=linear_loss)
    assert generic["measured_change"] < -1e-4  # the same construction with a generic gradient does descend
    assert generic["measured_change"] == pytest.approx(generic["predicted_change"], rel=1e-10)  # linear loss: exact
    # Relative to the generic change, 1e-10 (not an absolute 1e-13): the fit goes through pinv and eigh,
    # so the orthogonal gradient's projection is cond(Psi)^2 eps, not zero.
    [saturated] = matched_insertion(model, lambda: [(x, orthogonal)], 1, [1e-2], loss_fn=linear_loss)
    scale = abs(generic["predicted_change"])
    assert abs(saturated["predicted_change"]) < 1e-10 * scale and abs(saturated["measured_change"]) < 1e-10 * scale
    assert saturated["relative_residual"] == pytest.approx(1.0, abs=1e-10)


def test_closed_form_fit_equals_gradient_descent_run_to_convergence(monkeypatch, caplog):
    monkeypatch.setattr(long_run, "LONG_S", 0.0)  # any fit is "long": its estimate is announced once
    model, x, y = CASES["resnet"](2, batch=2, size=8)  # candidate 0: 128 rows, k = 36 features
    reg = per_example_tangent_regression(model, one_pass(x, y, 1)(), 0)
    evals = torch.linalg.eigvalsh(reg.gram.P)
    condition = float(evals.max() / evals.min())
    assert reg.gram.rank() == 36 and condition < 200  # full rank, so GD's limit is the unique fit
    # The error shrinks like (1 - 1/condition)^steps: run until that is below 1e-7 relative.
    steps = math.ceil(math.log(1e-7) / math.log(1 - 1 / condition))
    with caplog.at_level("WARNING", logger=long_run.__name__):
        [row] = matched_insertion(model, one_pass(x, y, 1), 0, [1e-3], fit="gradient-descent", gd_steps=steps)
    [line] = [r.getMessage() for r in caplog.records if r.name == long_run.__name__]
    assert line.startswith(f"--gd-steps {steps}: {steps - 3:,} steps to go") and "pass a smaller --gd-steps" in line
    assert row["fit_gap_closed_form"] < 1e-5
    [closed] = matched_insertion(model, one_pass(x, y, 1), 0, [1e-3])
    assert row["measured_change"] == pytest.approx(closed["measured_change"], rel=1e-6)


def test_next_candidate_is_where_the_cyclic_rule_puts_the_next_block():
    for n in (0, 1, 2, 5, 6, 26):
        index = extra_block_position(n)[1]
        grown = ResNet(ResNetConfig(extra_blocks=n + 1))
        before = ResNet(ResNetConfig(extra_blocks=n))
        # The grown net's stage layout equals the old one with one block more where candidate `index` reads.
        assert (
            grown.stage_of_block
            == before.stage_of_block[:index] + [grown.stage_of_block[index]] + before.stage_of_block[index:]
        )
        assert resolve_candidates("next", n) == [index]
    assert resolve_candidates("all", 0) == [0, 1, 2, 3]


def test_stage1_end_is_one_kind_of_candidate_at_the_papers_four_depths():
    # "next" reads ResNet-34 (N = 26) at the head's input; stage1-end reads every depth where stage 1 ends.
    assert resolve_candidates("next", 26) == [len(ResNet(ResNetConfig(extra_blocks=26)).blocks)]
    for n in PAPER_DEPTHS:
        model = ResNet(ResNetConfig(extra_blocks=n))
        (index,) = resolve_candidates("stage1-end", n)
        assert model.stage_of_block[index - 1] == 0 and model.stage_of_block[index] == 1, n


BATCH = 65_536  # examples per lazily generated batch of the memory check
WIDTH = 4  # the stream's width d


def memory_child(n_batches: int) -> float:
    """In a fresh process: the matched insertion over ``n_batches`` lazily generated batches; peak RSS in MiB."""
    # Float64 passes in one chunk per batch: the production chunk (16 examples, fast for CPU float64 convolutions)
    # would make 4,096 passes of this MLP per batch; how a batch is chunked keeps nothing either way.
    matched_insertion_measure.FLOAT64_CHUNK = BATCH
    torch.manual_seed(0)
    model = NarrowMLP().eval()

    def batches():
        g = torch.Generator().manual_seed(1)
        for _ in range(n_batches):
            yield torch.randn(BATCH, 2, generator=g), torch.randint(0, 3, (BATCH,), generator=g)

    matched_insertion(model, batches, 1, [1e-3])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class NarrowMLP(nn.Module):
    """Two input features lifted to a width-4 stream, so the states outweigh the (never stored) inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(2, WIDTH)
        self.blocks = nn.ModuleList([MLPBlock(WIDTH)])
        self.head = nn.Linear(WIDTH, 3)

    def forward(self, x):
        z = self.stem(x)
        for block in self.blocks:
            z = block(z)
        return self.head(z)

    def candidates(self):
        return [Candidate(0, "block0.in", self.blocks[0], "linear"), Candidate(1, "head.in", self.head, "linear")]


@pytest.mark.slow
def test_nothing_of_size_n_by_d_is_kept():
    code = "import sys; from tests.experiments.test_matched_insertion import memory_child; print(memory_child(int(sys.argv[1])))"

    # Two fresh processes at once (their start-up dominates); each reports its own peak RSS.
    children = [
        subprocess.Popen([sys.executable, "-c", code, str(n)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for n in (3, 24)
    ]
    outputs = [child.communicate()[0] for child in children]
    assert all(child.returncode == 0 for child in children), outputs
    one, eight = (float(out.strip().splitlines()[-1]) for out in outputs)
    # Keeping z and g (float32) of every example would add 2 * 21 batches * 65,536 * 4 * 4 bytes = 42 MiB.
    kept = 2 * (24 - 3) * BATCH * WIDTH * 4 / 2**20
    assert eight < one + kept / 2, (one, eight, kept)


def test_the_fit_and_every_evaluation_run_without_tf32(tf32_everywhere):
    assert math_mode()["tf32"]
    seen = []

    def spying_loss(output, target):
        seen.append(math_mode()["tf32"])
        return F.cross_entropy(output, target)

    model, x, y = CASES["mlp"](0, batch=8)
    [row] = matched_insertion(model, one_pass(x, y, 4), 1, [1e-3], loss_fn=spying_loss, test_batches=one_pass(x, y, 8))
    assert len(seen) >= 2 + 2 + 2 + 1 + 1 and not any(seen)  # statistics, before, after, test before and after
    assert row["math_mode"]["tf32"] is False
    assert precision_flags() == tf32_everywhere  # restored afterwards
