"""Speed of the GPT-2 of ``common/models/gpt.py`` (paper B.4, issue 13): training tokens/s, the AG probe, MFU.

On the CPU, in one run (interleaved repetitions, median and spread reported, float32):

- training tokens/s of our GPT-2 against ``transformers``' ``GPT2LMHeadModel`` (SDPA attention,
  ``use_cache=False``) at the same configuration, batch and sequence length: one step is
  forward, mean token cross-entropy, backward and an AdamW step. Target: ours at least as fast (>= 1.0x);
- the AG probe over all ``L + 1`` candidates (:func:`common.science.probe.probe_activation_gradients`: one
  forward, the input-gradient half of the backward) against a plain training forward + backward
  of the same batch. Target: <= 0.9x.

With ``--device cuda`` (or ``npu``): GPT-2 Small at ``L = 12`` (d = 768, 12 heads, context 1024,
vocabulary 50304), bf16 autocast, ``torch.compile`` (CUDA), fused AdamW: tokens/s and the model
FLOPs utilisation ``tokens/s * (6 N + 12 L d T) / peak`` with the dense bf16 peak from
``common.experiments.gpt2_ascend.PEAK_BF16_TFLOPS`` (``--peak-tflops`` overrides). Target, not a
gate: >= 45% MFU on an H100/H200-class GPU.

    .venv/bin/python benchmarks/bench_gpt.py [--reps 5] [--threads 2]
    .venv/bin/python benchmarks/bench_gpt.py --device cuda [--gpu-batch 16] [--steps 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import GPT2LMHeadModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.experiments.gpt2_ascend import peak_flops
from common.models.gpt import GPT, GPTConfig
from common.models.gpt_export import hf_config
from common.science.probe import probe_activation_gradients
from common.training import device as devices
from common.training.device import cpu_count, device_name
from common.training.epoch import classification_loss
from common.training.recipes import AdamWRecipe

TARGET_SPEED, TARGET_PROBE, TARGET_MFU = 1.0, 0.90, 0.45
RECIPE = AdamWRecipe(steps=1, lr=6e-4, eval_interval=1)  # the optimiser of the training runs


def hf_gpt2(config: GPTConfig) -> GPT2LMHeadModel:
    """``GPT2LMHeadModel`` with our configuration (:func:`common.models.gpt_export.hf_config`: the padded vocabulary,
    no dropout, tanh GELU, tied head)."""
    return GPT2LMHeadModel(hf_config(config))


def train_step(forward, optimizer, x, y, dev) -> None:
    with devices.autocast(dev, dev.type != "cpu"):
        logits = forward(x)
    loss = classification_loss(logits, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def fwd_bwd(model, x, y) -> None:
    model.zero_grad(set_to_none=True)
    classification_loss(model(x), y).backward()


def interleaved(fns: dict, reps: int, sync=lambda: None) -> dict[str, list[float]]:
    """Seconds per call of each function over ``reps`` turns, run in turns after one warm-up call each."""
    for fn in fns.values():
        fn()
    sync()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            sync()
            times[name].append(time.perf_counter() - start)
    return times


def spread(ts: list[float]) -> str:
    return f"median {statistics.median(ts) * 1e3:.0f} ms (min {min(ts) * 1e3:.0f}, max {max(ts) * 1e3:.0f})"


def cpu_benchmarks(args) -> bool:
    config = GPTConfig(
        n_layer=args.layers, n_embd=args.width, n_head=args.heads, block_size=args.seq, vocab_size=args.vocab
    )
    torch.manual_seed(0)
    ours, theirs = GPT(config), hf_gpt2(config)
    assert sum(p.numel() for p in ours.parameters()) == sum(
        p.numel() for p in theirs.parameters()
    )  # the same model size
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, config.vocab_size, (args.batch, args.seq), generator=g)
    y = torch.randint(0, config.vocab_size, (args.batch, args.seq), generator=g)
    opt_ours, opt_theirs = RECIPE.make_optimizer(ours), RECIPE.make_optimizer(theirs)
    cpu = torch.device("cpu")

    def hf_logits(ids):
        return theirs(input_ids=ids, use_cache=False).logits

    times = interleaved(
        {
            "ours": lambda: train_step(ours, opt_ours, x, y, cpu),
            "transformers": lambda: train_step(hf_logits, opt_theirs, x, y, cpu),
            "fwd+bwd": lambda: fwd_bwd(ours, x, y),
            "probe": lambda: probe_activation_gradients(ours, [(x, y)], loss_fn=classification_loss),
        },
        args.reps,
    )
    tokens = args.batch * args.seq
    med = {k: statistics.median(v) for k, v in times.items()}
    speed, probe = med["transformers"] / med["ours"], med["probe"] / med["fwd+bwd"]
    print(
        f"CPU, {torch.get_num_threads()} threads, torch {torch.__version__}: L={args.layers} d={args.width} heads={args.heads} "
        f"T={args.seq} vocab={config.padded_vocab_size} batch {args.batch} ({tokens} tokens), {args.reps} interleaved reps"
    )
    print(f"  training step, ours:          {tokens / med['ours']:>9.0f} tokens/s  {spread(times['ours'])}")
    print(
        f"  training step, GPT2LMHeadModel:{tokens / med['transformers']:>9.0f} tokens/s  {spread(times['transformers'])}"
    )
    print(f"  -> ours / transformers speed: {speed:.2f}x (target >= {TARGET_SPEED})")
    per_rep = [p / t for p, t in zip(times["probe"], times["fwd+bwd"], strict=True)]
    print(
        f"  AG probe, {len(ours.candidates())} candidates: {spread(times['probe'])}; training fwd+bwd {spread(times['fwd+bwd'])}"
    )
    print(
        f"  -> probe / (fwd+bwd): {probe:.2f}x (per rep {min(per_rep):.2f}-{max(per_rep):.2f}; target <= {TARGET_PROBE})"
    )
    return speed >= TARGET_SPEED and probe <= TARGET_PROBE


def accelerator_benchmark(args) -> bool:
    """GPT-2 Small, bf16, compiled (CUDA): tokens/s and MFU. Not run in this repository's CI (no GPU)."""
    dev = devices.resolve_device(args.device)
    config = GPTConfig(n_layer=12)
    torch.manual_seed(0)
    model = GPT(config).to(dev)
    optimizer = RECIPE.make_optimizer(model)  # fused AdamW on CUDA
    forward = torch.compile(model) if dev.type == "cuda" and not args.no_compile else model
    x = torch.randint(0, config.vocab_size, (args.gpu_batch, config.block_size), device=dev)
    y = torch.randint(0, config.vocab_size, (args.gpu_batch, config.block_size), device=dev)

    def sync():
        getattr(torch, dev.type).synchronize()

    for _ in range(args.warmup):  # compilation and autotuning
        train_step(forward, optimizer, x, y, dev)
    sync()
    start = time.perf_counter()
    for _ in range(args.steps):
        train_step(forward, optimizer, x, y, dev)
    sync()
    seconds = (time.perf_counter() - start) / args.steps
    tokens_per_s = args.gpu_batch * config.block_size / seconds
    name = device_name(dev)
    peak = peak_flops(name, args.peak_tflops)
    flops = model.flops_per_token()
    mfu = tokens_per_s * flops / peak if peak else None
    print(
        f"{name}: GPT-2 Small L=12, bf16, {'compiled' if forward is not model else 'eager'}, batch {args.gpu_batch} x {config.block_size}: "
        f"{seconds * 1e3:.1f} ms/step, {tokens_per_s:,.0f} tokens/s, {flops / 1e9:.3f} GFLOP/token"
    )
    if mfu is None:
        print("  MFU: unknown peak for this device; pass --peak-tflops")
        return True
    print(f"  MFU {100 * mfu:.1f}% of {peak / 1e12:.0f} TFLOP/s (target, not a gate: >= {100 * TARGET_MFU:.0f}%)")
    return mfu >= TARGET_MFU


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument(
        "--device",
        default="cpu",
        choices=("cpu", "cuda", "npu"),
        help="cpu: the comparisons; cuda/npu: GPT-2 Small MFU",
    )
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=cpu_count(), help="torch CPU threads")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument(
        "--gpu-batch", type=int, default=16, help="sequences of 1024 tokens per step on the accelerator"
    )
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument(
        "--peak-tflops", type=float, default=None, help="the device's dense bf16 peak; None: the built-in table"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ok = cpu_benchmarks(args) if args.device == "cpu" else accelerator_benchmark(args)
    print("all targets met" if ok else "some targets missed")


if __name__ == "__main__":
    main()
