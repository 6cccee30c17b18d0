"""What only breaks on a GPU or an Ascend NPU, exercised on the CPU wherever the mechanism allows (issue 9).

Each test stands in for an accelerator by replacing one capability answer (``monkeypatch``):
dynamo's per-function compile limit with the ``eager`` backend, a 4-device RNG, a device without
float64, a chip with or without native bf16, ``torch.accelerator.synchronize``, a torchrun
environment, the ``cudnn.benchmark`` decision. The checks that need the real device are in
``benchmarks/gpu_check.py``; its CPU dry run ends this file (one run, shared by the tests that read its report).
"""

from __future__ import annotations

import functools
import importlib
import random
from types import SimpleNamespace

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from torch import nn
from torch._dynamo.utils import counters

from common.data.loader import TensorLoader
from common.data.vision import make_synthetic
from common.errors import UserError
from common.models import hf_decoder
from common.models.resnet import ResNet, ResNetConfig
from common.runs import record_io, run_store
from common.science import activations, gram, precision, probe, projection
from common.training import device as devices
from common.training import distributed, evaluation
from common.training.epoch import train_epoch
from common.training.evaluation import evaluate
from common.training.loop import train
from common.training.recipes import Schedule, SGDRecipe, TrainSettings
from tests.helpers import precision_flags

script = importlib.import_module("01_train_resnet_sweep")
checker = importlib.import_module("benchmarks.gpu_check")
NPU = SimpleNamespace(type="npu")  # torch.device("npu") exists only once torch_npu is imported
CUDA = torch.device("cuda")


@pytest.fixture(autouse=True)
def one_thread():
    """Toy models: one thread is fastest and does not stall when other processes load the machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ----------------------------------------------------------------------------- 1. compile per run
def test_five_depths_in_one_process_each_compile_their_block_types_after_the_compiler_reset(tmp_path, monkeypatch):
    """Dynamo keeps at most ``recompile_limit`` versions of ``ResidualBlock.forward`` per process, shared by all depths.

    Every run compiles its blocks (common/training/compile.py), one graph per block type here (one full training batch, no
    evaluation): ResNet-8 and -9 have three types (stage 1's blocks, the two downsampling blocks), ResNet-10 adds
    stage 2's stride-1 block, ResNet-11 and -12 stage 3's. The counts are those of the depth alone, although the
    depths run one after another in one process: ``torch.compiler.reset()`` per run (without it a later depth would
    reuse the earlier graphs and compile nothing). ``fail_on_recompile_limit_hit`` turns dynamo's silent fallback to
    eager at the limit into an error; the GPU check is ``benchmarks/gpu_check.py`` item 2.
    """
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    data = make_synthetic(num_train=8, num_test=8, num_classes=3, image_size=8, seed=0)
    loader = TensorLoader(data.x_train, data.y_train, 8, train=True, mean=data.mean, std=data.std)
    settings = TrainSettings(SGDRecipe(epochs=1, lr=0.05), compile=True)
    compiled, recorded = [], []
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        for n in range(5):
            before = counters["frames"]["ok"]
            torch.manual_seed(n)
            model = ResNet(ResNetConfig(extra_blocks=n, widths=(2, 2, 2), num_classes=3))
            summary = train(
                model, loader, {}, run_dir=tmp_path / f"n{n}", settings=settings, device=torch.device("cpu")
            )
            compiled.append(counters["frames"]["ok"] - before)
            recorded.append(summary["compile"]["frames"])
    assert compiled == recorded == [3, 3, 4, 5, 5], compiled


# ----------------------------------------------------------------------------- 2. RNG across device counts
class FakeAccelerator:
    """``torch.cuda``'s RNG calls for ``n`` devices, each with its own generator state."""

    def __init__(self, n: int, current: int = 0, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.states = [torch.randint(0, 256, (16,), dtype=torch.uint8, generator=g) for _ in range(n)]
        self.current = current

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return len(self.states)

    def current_device(self) -> int:
        return self.current

    def get_rng_state(self) -> torch.Tensor:
        return self.states[self.current].clone()

    def set_rng_state(self, state: torch.Tensor) -> None:
        self.states[self.current] = state.clone()


def _with_accelerator(monkeypatch, fake: FakeAccelerator) -> None:
    monkeypatch.setattr(devices, "rng_accelerators", lambda: {"cuda": fake})


def test_rng_state_saved_with_four_devices_restores_with_one(tmp_path, monkeypatch):
    four = FakeAccelerator(4, current=2, seed=1)
    _with_accelerator(monkeypatch, four)
    run_store.save_checkpoint(tmp_path / "c.pt", {"rng": devices.rng_state(CUDA)})
    saved = run_store.load_checkpoint(tmp_path / "c.pt")["rng"]  # weights_only=True
    assert torch.equal(saved["cuda"], four.states[2])  # only the current device's state is stored

    one = FakeAccelerator(1, seed=2)
    _with_accelerator(monkeypatch, one)
    devices.set_rng_state(saved, CUDA)
    assert torch.equal(one.states[0], four.states[2])


def test_old_checkpoints_with_one_state_per_device_resume_on_fewer_devices(monkeypatch):
    old = {"python": random.getstate(), "numpy": devices.rng_state()["numpy"], "torch": torch.get_rng_state()}
    four = FakeAccelerator(4, seed=3)
    old["cuda"] = list(four.states)  # torch.cuda.get_rng_state_all() of a 4-GPU run
    one = FakeAccelerator(1, seed=4)
    _with_accelerator(monkeypatch, one)
    devices.set_rng_state(old, CUDA)  # used to raise IndexError
    assert torch.equal(one.states[0], four.states[0])


class Untouchable(FakeAccelerator):
    """A GPU a CPU run must leave alone: reading or setting its RNG (which would create a CUDA context on GPU 0) is recorded."""

    def __init__(self) -> None:
        super().__init__(4)
        self.touched = []

    def get_rng_state(self):
        self.touched.append("get")
        return super().get_rng_state()

    def set_rng_state(self, state):
        self.touched.append("set")
        super().set_rng_state(state)


def test_a_cpu_run_on_a_gpu_node_never_touches_the_gpu_rng(tmp_path, monkeypatch):
    torch.manual_seed(0)
    batches = [(torch.randint(0, 7, (4, 5)), torch.randint(0, 7, (4, 5))) for _ in range(2)]

    def run(on_epoch_end=None):
        torch.manual_seed(1)
        model = nn.Sequential(nn.Embedding(7, 4), nn.Linear(4, 7))
        settings = TrainSettings(SGDRecipe(epochs=2, lr=0.1))
        return train(
            model,
            batches,
            {},
            run_dir=tmp_path,
            settings=settings,
            device=torch.device("cpu"),
            on_epoch_end=on_epoch_end,
        )

    def kill(epoch, record):
        raise KeyboardInterrupt

    gpu = Untouchable()
    _with_accelerator(monkeypatch, gpu)
    with pytest.raises(KeyboardInterrupt):
        run(kill)
    assert "cuda" not in run_store.resume_state(tmp_path)["rng"]
    assert run()["epochs"] == 2  # resumed
    assert gpu.touched == []
    assert set(devices.rng_state(CUDA)) >= {"cuda"} and gpu.touched == ["get"]  # a GPU run does store it


# ----------------------------------------------------------------------------- 3. float64 on the CPU
def test_float64_runs_on_the_cpu_for_mps_and_npu_only():
    assert [precision.supports_float64(d) for d in ("cpu", "cuda:1", torch.device("cpu"), "mps", "npu:0")] == [
        True,
        True,
        True,
        False,
        False,
    ]
    assert [str(precision.float64_device(d)) for d in ("cuda:1", "mps", "npu", None)] == ["cuda:1", "cpu", "cpu", "cpu"]
    users = (projection, probe, activations, gram, hf_decoder, evaluation)
    assert all(
        m.float64_device is precision.float64_device for m in users
    )  # one decision, made in common.science.precision
    assert not hasattr(devices, "float64_device")


def test_gram_statistics_of_a_device_without_float64_live_on_the_cpu(monkeypatch):
    monkeypatch.setattr(precision, "supports_float64", lambda device: False)
    acc = projection.GramAccumulator(3, 2, device=torch.device("meta"))  # meta stands in for the accelerator
    assert acc.device == torch.device("cpu") and acc.P.device == acc.X.device == torch.device("cpu")
    acc.update(torch.eye(3), torch.ones(3, 2))
    # rel 1e-10: V_S,l passes through eigh (exact for P = I on one machine, not promised on every kernel).
    assert acc.growth_value() == pytest.approx(6**0.5, rel=1e-10) and acc.rank() == 3


def test_exact_probe_records_where_float64_ran_and_gives_the_same_values(monkeypatch):
    torch.manual_seed(0)
    model = ResNet(ResNetConfig(extra_blocks=0, widths=(2, 3, 3), num_classes=3)).double()
    batches = [(torch.randn(4, 3, 8, 8, dtype=torch.float64), torch.randint(0, 3, (4,)))]
    native = probe.probe_activation_gradients(model, batches, exact=True)
    asked = []
    monkeypatch.setattr(precision, "supports_float64", lambda device: asked.append(str(device)) or False)
    fallback = probe.probe_activation_gradients(model, batches, exact=True)
    assert asked and fallback.summary()["float64_device"] == "cpu"
    for a, b in zip(native.scores, fallback.scores, strict=True):
        assert (a.growth_value, a.tangent_rank, a.ag_norm) == (b.growth_value, b.tangent_rank, b.ag_norm)


def test_block_influence_and_mean_loss_take_float64_where_float64_device_says(monkeypatch):
    """Both used to call ``.double()`` on the device, which an NPU or MPS cannot; now they ask :func:`float64_device`."""
    asked = []

    def cpu_for_float64(device):
        asked.append(torch.device(device).type)
        return torch.device("cpu")

    monkeypatch.setattr(hf_decoder, "float64_device", cpu_for_float64)
    monkeypatch.setattr(activations, "float64_device", cpu_for_float64)
    x, z = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    bi = hf_decoder.block_influence_per_token(x, z)
    assert asked == ["cpu"] and bi.dtype == torch.float64
    assert torch.equal(bi, 1.0 - F.cosine_similarity(x.double(), z.double(), dim=-1))
    torch.manual_seed(0)
    model, xb, yb = nn.Linear(3, 2), torch.randn(4, 3), torch.randint(0, 2, (4,))
    assert activations.mean_loss(model, [(xb, yb)]) == F.cross_entropy(model(xb).double(), yb).item()
    assert asked == ["cpu", "cpu"]


# ----------------------------------------------------------------------------- 4. TF32 in the probe
class _Spy(nn.Module):
    """A one-candidate model that records the math mode its forward runs in."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.inner, self.head, self.seen, self.fail = nn.Linear(3, 3), nn.Linear(3, 2), [], fail

    def forward(self, x):
        self.seen.append(precision.math_mode())
        if self.fail:
            raise RuntimeError("deliberate")
        return self.head(self.inner(x))

    def candidates(self):
        return [SimpleNamespace(index=0, name="head.in", module=self.head, family="linear")]


def test_probe_switches_tf32_off_for_its_duration_and_restores_it(tf32_everywhere):
    assert precision.math_mode()["tf32"]
    model = _Spy()
    result = probe.probe_activation_gradients(model, [(torch.randn(4, 3), torch.randint(0, 2, (4,)))])
    assert model.seen and not any(mode["tf32"] for mode in model.seen)
    assert model.seen[0]["cudnn_conv"] == model.seen[0]["cuda_matmul"] == "ieee"
    assert result.summary()["math_mode"] == model.seen[0]
    assert precision_flags() == tf32_everywhere  # restored exactly
    with pytest.raises(RuntimeError, match="deliberate"):
        probe.probe_activation_gradients(_Spy(fail=True), [(torch.randn(4, 3), torch.randint(0, 2, (4,)))])
    assert precision_flags() == tf32_everywhere  # also after an error


def test_the_precision_guard_switches_an_npus_hf32_off_and_restores_it(monkeypatch):
    """torch_npu allows HF32 (~1e-3 relative) for convolutions by default; the guard saves, clears and restores both flags."""
    npu = SimpleNamespace(conv=SimpleNamespace(allow_hf32=True), matmul=SimpleNamespace(allow_hf32=False))
    monkeypatch.setattr(torch, "npu", npu, raising=False)
    assert precision.math_mode()["hf32"] and precision.math_mode()["npu_conv_hf32"]
    with precision.full_precision() as mode:
        assert (npu.conv.allow_hf32, npu.matmul.allow_hf32) == (False, False)
        assert (mode["hf32"], mode["npu_conv_hf32"], mode["npu_matmul_hf32"]) == (False, False, False)
    assert (npu.conv.allow_hf32, npu.matmul.allow_hf32) == (True, False)
    with pytest.raises(RuntimeError, match="deliberate"), precision.full_precision():
        raise RuntimeError("deliberate")
    assert (npu.conv.allow_hf32, npu.matmul.allow_hf32) == (True, False)
    monkeypatch.delattr(torch, "npu")
    assert not any("hf32" in key for key in precision.math_mode())  # records without torch_npu are as before


class _EvalSpy(nn.Module):
    """Token logits; records the math mode of every evaluation-mode forward."""

    def __init__(self) -> None:
        super().__init__()
        self.net, self.modes = nn.Sequential(nn.Embedding(7, 4), nn.Linear(4, 7)), []

    def forward(self, x):
        if not self.training:
            self.modes.append(precision.math_mode())
        return self.net(x)


def test_the_final_evaluation_runs_under_the_full_precision_guard_and_records_its_math_mode(tmp_path, tf32_everywhere):
    torch.manual_seed(0)
    batches = [(torch.randint(0, 7, (4, 5)), torch.randint(0, 7, (4, 5)))]
    model = _EvalSpy()
    summary = train(
        model,
        batches,
        {"val": batches},
        final_eval_loaders={"train": batches},
        run_dir=tmp_path,
        settings=TrainSettings(SGDRecipe(epochs=1, lr=0.1)),
        device=torch.device("cpu"),
    )
    per_epoch, final = model.modes[0], model.modes[-1]
    assert per_epoch["tf32"] and not final["tf32"]  # training's math mode, then the guard's
    assert summary["final_eval_math_mode"] == final and summary["final_eval_dtype"] == "float32"
    assert precision_flags() == tf32_everywhere  # restored
    assert precision.float32_reduced_on(CUDA)  # so a CUDA run evaluates its per-epoch loaders again, in full precision
    assert not precision.float32_reduced_on(torch.device("cpu"))


def test_training_ends_with_no_gradients_left(tmp_path):
    """What the probe of a 2.8B model cannot afford: 11 GB of float32 .grad left over from the last step."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(7, 4), nn.Linear(4, 7))
    train(
        model,
        [(torch.randint(0, 7, (4, 5)), torch.randint(0, 7, (4, 5)))],
        {},
        run_dir=tmp_path,
        settings=TrainSettings(SGDRecipe(epochs=1, lr=0.1)),
        device=torch.device("cpu"),
    )
    assert all(p.grad is None for p in model.parameters())


# ----------------------------------------------------------------------------- 5. mixed precision
@pytest.mark.parametrize(
    ("native", "emulated", "expected"),
    [(True, True, torch.bfloat16), (False, True, None), (False, False, None)],
    ids=["A100/H100", "V100/T4 (emulated bf16)", "no bf16"],
)
def test_cuda_uses_bf16_only_where_it_is_native(monkeypatch, native, emulated, expected):
    monkeypatch.setattr(
        torch.cuda, "is_bf16_supported", lambda including_emulation=True: emulated if including_emulation else native
    )
    assert devices.autocast_dtype(CUDA) is expected
    assert devices.precision_name(CUDA) == ("bfloat16" if expected else "float32")


@pytest.mark.parametrize(("answer", "expected"), [(True, torch.bfloat16), (False, None), ("missing", None)])
def test_npu_asks_torch_npu_for_bf16(monkeypatch, answer, expected):
    npu = SimpleNamespace() if answer == "missing" else SimpleNamespace(is_bf16_supported=lambda: answer)
    monkeypatch.setattr(torch, "npu", npu, raising=False)
    assert devices.autocast_dtype(NPU) is expected


def test_cpu_and_mps_train_in_float32():
    assert devices.autocast_dtype(torch.device("cpu")) is None and devices.autocast_dtype(torch.device("mps")) is None


def test_final_reported_losses_are_float32_when_training_in_bf16(tmp_path, monkeypatch):
    monkeypatch.setattr(devices, "bf16_supported", lambda device: True)  # bf16 autocast on the CPU
    torch.manual_seed(0)
    batches = [(torch.randint(0, 11, (8, 6)), torch.randint(0, 11, (8, 6))) for _ in range(2)]
    model = nn.Sequential(nn.Embedding(11, 16), nn.Linear(16, 11))
    summary = train(
        model,
        batches,
        {"val": batches},
        run_dir=tmp_path,
        settings=TrainSettings(SGDRecipe(epochs=1, lr=0.5)),
        device=torch.device("cpu"),
    )
    float32 = evaluate(model, batches, torch.device("cpu"), amp=False)["loss"]
    bf16 = run_store.read_metrics(tmp_path)[-1]["val_loss"]
    assert summary["autocast_dtype"] == "bfloat16" and summary["final_eval_dtype"] == "float32"
    assert bf16 != float32 and summary["val_loss"] == float32


# ----------------------------------------------------------------------------- 6. timing
def test_epoch_timing_synchronises_any_accelerator(monkeypatch):
    synced = []
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda device=None: synced.append(device))
    devices.synchronize(torch.device("cpu"))
    devices.synchronize(NPU)
    assert synced == [NPU]

    seen = []
    monkeypatch.setattr(devices, "synchronize", seen.append)
    model = nn.Linear(2, 2)
    settings = TrainSettings(SGDRecipe(epochs=1, lr=0.1))
    batches = [(torch.randn(3, 2), torch.randint(0, 2, (3,)))]
    train_epoch(
        model,
        settings.recipe.make_optimizer(model),
        batches,
        schedule=Schedule.of(settings.recipe, 1),
        step=0,
        settings=settings,
        device=torch.device("cpu"),
    )
    assert seen == [torch.device("cpu")]


# ----------------------------------------------------------------------------- 7. processes and devices
def test_each_process_takes_its_local_rank_or_its_only_visible_device():
    assert [distributed.local_device_index(r, 4) for r in range(4)] == [0, 1, 2, 3]  # torchrun: all visible
    assert [distributed.local_device_index(r, 1) for r in range(4)] == [0, 0, 0, 0]  # SLURM --gpus-per-task=1
    with pytest.raises(UserError, match="--gpus-per-task"):
        distributed.local_device_index(3, 2)
    with pytest.raises(UserError, match="no cuda device"):
        distributed.local_device_index(0, 0)


def _torchrun_env(monkeypatch, world_size: int, local_rank: int = 0) -> None:
    monkeypatch.setenv("WORLD_SIZE", str(world_size))
    monkeypatch.setenv("RANK", str(local_rank))
    monkeypatch.setenv("LOCAL_RANK", str(local_rank))


def test_a_task_bound_to_one_gpu_sets_device_zero(monkeypatch):
    _torchrun_env(monkeypatch, 4, local_rank=3)
    chosen = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)  # no real process group
    info = distributed.init_distributed("cuda")
    assert chosen == [0] and info.device == "cuda:0" and info.backend == "nccl" and info.local_rank == 3


def test_npu_jobs_import_torch_npu_before_joining(monkeypatch):
    _torchrun_env(monkeypatch, 2)
    imported = []
    monkeypatch.setattr(distributed, "import_torch_npu", lambda: imported.append(True))
    monkeypatch.setattr(
        torch, "npu", SimpleNamespace(device_count=lambda: 2, set_device=imported.append), raising=False
    )
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)
    info = distributed.init_distributed("npu")
    assert imported == [True, 0] and info.backend == "hccl" and info.device == "npu:0"


def test_local_distributed_jobs_count_npus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(devices, "npu_available", lambda: True)
    monkeypatch.setattr(torch, "npu", SimpleNamespace(device_count=lambda: 8), raising=False)
    assert devices.accelerator_count() == 8


def test_script_01_under_torchrun_is_refused_with_one_line(tmp_path, monkeypatch, capsys):
    _torchrun_env(monkeypatch, 4)
    argv = [
        "--preset",
        "smoke",
        "--dataset",
        "synthetic",
        "--device",
        "cpu",
        "--depths",
        "0",
        "--out",
        str(tmp_path / "runs"),
    ]
    assert script.main(argv) == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert "torchrun" in line and "--launcher local" in line and "one process per run" in line
    assert not (tmp_path / "runs" / "resnet_sweep").exists()  # nothing planned, nothing written
    monkeypatch.setenv("WORLD_SIZE", "1")  # torchrun --nproc-per-node 1: one copy, allowed
    assert script.main([*argv, "--dry-run"]) == 0


# ----------------------------------------------------------------------------- 8. cudnn.benchmark
@pytest.mark.parametrize(
    ("device_type", "deterministic", "runs_per_device", "static", "expected"),
    [
        ("cuda", False, 1, True, True),  # a GPU of its own, static shapes: the fastest algorithm per shape
        ("cuda", True, 1, True, False),  # deterministic mode: the choice would depend on timings
        ("cuda", False, 2, True, False),  # --runs-per-device 2: timings under another run's load
        ("cuda", False, 1, False, False),  # a shape per partial batch: a benchmark per shape
        ("cpu", False, 1, True, False),  # no cuDNN
        ("npu", False, 1, True, False),
        ("mps", False, 1, True, False),
    ],
)
def test_cudnn_benchmark_is_on_only_for_cuda_with_static_shapes_alone_on_the_device_and_not_deterministic(
    device_type, deterministic, runs_per_device, static, expected
):
    assert (
        devices.cudnn_benchmark(
            device_type, deterministic=deterministic, runs_per_device=runs_per_device, static_shapes=static
        )
        is expected
    )


class _BenchmarkSpy(nn.Module):
    """Token logits; records ``cudnn.benchmark`` at every forward."""

    def __init__(self) -> None:
        super().__init__()
        self.net, self.flags = nn.Sequential(nn.Embedding(7, 4), nn.Linear(4, 7)), []

    def forward(self, x):
        self.flags.append(torch.backends.cudnn.benchmark)
        return self.net(x)


def test_training_sets_cudnn_benchmark_for_its_rounds_as_decided_and_restores_it(tmp_path, monkeypatch):
    """``train`` asks the decision with ``--runs-per-device`` from the job's environment and deterministic mode
    from torch, sets the flag for its rounds, records it as ``cudnn_benchmark`` and then restores the flag
    (the probe after training). The CPU stands in for CUDA: the decision is asked without the device type."""
    asked, real = [], devices.cudnn_benchmark

    def decide(kind, **flags):
        asked.append(flags)
        return real("cuda", **flags)

    monkeypatch.setattr(devices, "cudnn_benchmark", decide)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    batches = [(torch.randint(0, 7, (4, 5)), torch.randint(0, 7, (4, 5)))]
    settings = TrainSettings(SGDRecipe(epochs=1, lr=0.1))
    cases = [("1", False, True), ("3", False, False), ("1", True, False)]  # K, deterministic mode, expected
    for i, (k, deterministic, expected) in enumerate(cases):
        monkeypatch.setenv(devices.RUNS_PER_DEVICE_ENV, k)
        monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda d=deterministic: d)
        model = _BenchmarkSpy()
        summary = train(
            model,
            batches,
            {},
            final_eval_loaders={"train": batches},
            run_dir=tmp_path / str(i),
            settings=settings,
            device=torch.device("cpu"),
        )
        assert asked.pop() == {"deterministic": deterministic, "runs_per_device": int(k), "static_shapes": True}
        assert summary["cudnn_benchmark"] is expected and model.flags[0] is expected  # training: as decided
        assert model.flags[-1] is False and torch.backends.cudnn.benchmark is False  # final evaluation: restored
    monkeypatch.delenv(devices.RUNS_PER_DEVICE_ENV)
    assert devices.runs_per_device() == 1


# ----------------------------------------------------------------------------- the GPU check itself
@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """One ``--cpu-dry-run`` of benchmarks/gpu_check.py at toy sizes: (the report ``run_check`` returns, the saved one).

    It checks the script, not a device (the GPU numbers: benchmarks/README.md)."""
    path = tmp_path_factory.mktemp("gpu-check") / "report.json"
    return checker.run_check(["--cpu-dry-run", "--out", str(path)]), record_io.read_json(path)


def test_gpu_check_cpu_dry_run_runs_every_item_and_writes_its_report(dry_run):
    report, saved = dry_run
    assert saved == report and saved["device"]["type"] == "cpu" and saved["mode"] == "cpu-dry-run"
    numbers = [item["number"] for item in saved["items"]]
    assert numbers == sorted(numbers) and len(numbers) >= 6
    statuses = [item["status"].split(":")[0] for item in saved["items"]]
    # no item failed: main() exits 0 (it exits 1 exactly when a status starts with "fail")
    assert set(statuses) <= {"pass", "skipped"} and statuses.count("pass") >= 6, statuses


def test_gpu_check_cpu_dry_run_reports_every_speed(dry_run):
    """What benchmarks/gpu_throughput.py's parts measured, now items 2 (epochs), 7 (probe), 8 (GPT-2), 11, 12."""
    items = {item["number"]: item for item in dry_run[1]["items"]}
    assert set(items) == set(range(1, 13))  # every item is in the report
    epochs = items[2]["rows"]
    assert [(r["n"], r["mode"]) for r in epochs] == [(n, mode) for n in (0, 1, 2) for mode in ("eager", "compiled")]
    assert all(r["epoch_s_per_50k"] > 0 for r in epochs)
    sharing = items[11]["rows"]
    assert [r["processes"] for r in sharing] == [1, 2] and sharing[0]["speedup_vs_one"] == 1
    assert [r["n"] for r in items[12]["rows"]] == [0, 2]
    assert items[7]["ag_over_train_step"] > 0 and items[7]["exact_over_train_step"] > 0
    step = items[8]["training_step"]
    assert step["tokens_per_s"] > 0 and step["flops_per_token"] > 0
