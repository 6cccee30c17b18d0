"""Cost of the hook-based AG probe on a Hugging Face decoder (issue 14): a tiny GPT-NeoX on the CPU.

One run, float32, interleaved repetitions after one warm-up each (median and spread reported):

- the probe as ``04_pythia_cpt.py`` runs it: :func:`common.science.probe.probe_activation_gradients` on
  :class:`common.models.hf_decoder.HFDecoder` (forward pre-hooks on every layer and on the final
  norm, frozen parameters: one forward and the input-gradient half of the backward) with
  ShortGPT's Block Influence recorded by :class:`~common.models.hf_decoder.BlockInfluence` in the
  same forward;
- the same probe without Block Influence (its own cost);
- a plain training forward + backward of the same batch (parameters require gradients, no hooks).

Target: probe / (forward + backward) <= 1.0x.

    .venv/bin/python benchmarks/bench_hf_probe.py [--reps 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_gpt import fwd_bwd, interleaved, spread

from common.models.hf_decoder import BlockInfluence, HFDecoder
from common.science.probe import probe_activation_gradients
from common.training.device import cpu_count
from common.training.epoch import classification_loss

TARGET_PROBE = 1.0


def probe(decoder: HFDecoder, x, y, block_influence: bool) -> None:
    if block_influence:
        with BlockInfluence(decoder):
            probe_activation_gradients(decoder, [(x, y)], loss_fn=classification_loss)
    else:
        probe_activation_gradients(decoder, [(x, y)], loss_fn=classification_loss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=cpu_count(), help="torch CPU threads")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = GPTNeoXConfig(
        vocab_size=args.vocab,
        hidden_size=args.width,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=4 * args.width,
        max_position_embeddings=args.seq,
    )
    decoder = HFDecoder(GPTNeoXForCausalLM(config)).eval()  # no dropout either way
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
    y = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
    times = interleaved(
        {
            "fwd+bwd": lambda: fwd_bwd(decoder, x, y),
            "probe+BI": lambda: probe(decoder, x, y, True),
            "probe": lambda: probe(decoder, x, y, False),
        },
        args.reps,
    )
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["probe+BI"] / med["fwd+bwd"]
    per_rep = [p / t for p, t in zip(times["probe+BI"], times["fwd+bwd"], strict=True)]
    params = sum(p.numel() for p in decoder.parameters())
    print(
        f"CPU, {torch.get_num_threads()} threads, torch {torch.__version__}: GPT-NeoX L={args.layers} d={args.width} heads={args.heads} "
        f"T={args.seq} vocab={args.vocab} ({params / 1e6:.1f}M parameters), batch {args.batch}, {args.reps} interleaved reps"
    )
    print(f"  training forward + backward: {spread(times['fwd+bwd'])}")
    print(f"  AG probe + Block Influence, {len(decoder.candidates())} candidates: {spread(times['probe+BI'])}")
    print(f"  AG probe alone: {spread(times['probe'])}")
    print(
        f"  -> probe / (fwd+bwd): {ratio:.2f}x (per rep {min(per_rep):.2f}-{max(per_rep):.2f}; target <= {TARGET_PROBE}); "
        f"Block Influence adds {med['probe+BI'] / med['probe'] - 1:+.1%} to the probe"
    )
    print("target met" if ratio <= TARGET_PROBE else "target missed")


if __name__ == "__main__":
    main()
