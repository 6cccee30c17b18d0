"""Where to add layers to a Hugging Face decoder: rank every place by the copied layer's growth value, expand, check.

Beyond the paper: the paper's growth value V_S,l says where extra depth has first-order value; this script uses it
on any causal LM that transformers loads. It probes the frozen model on a sample of a text, ranks every insertion
place (before each layer, and before the final norm) by the exact growth value of the layer that would be inserted
there (a copy of the layer it follows, its output projections zeroed: the function is unchanged), with AG_l and
ShortGPT's Block Influence beside it; places K copies per policy (criterion: largest V_S,l; even: LLaMA-Pro's
spacing; bi: beside the most important layers by Block Influence; ag: largest AG_l); checks that the expansion
gives the same logits and the same greedy tokens; with --save writes each expansion with save_pretrained (the
tokenizer and a JSON report beside it); with --train-steps S trains only the new layers, every policy at equal
steps, and prints one comparison table. One run per (K, seed). The job function is
:func:`common.experiments.expand_decoder.expand_run`.

    python 10_expand_decoder.py --preset smoke
    python 10_expand_decoder.py --model-path ~/models/pythia-160m-deduped --text-file notes.txt --blocks 2 --save expanded/
    python 10_expand_decoder.py --model EleutherAI/pythia-160m-deduped --text-file notes.txt --train-steps 200
    python 10_expand_decoder.py --preset mini --text-file data/tinyshakespeare.txt     # 05's L = 6 decoder, K = 1, 2
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common.experiments.expand_decoder import (
    EXPERIMENT,
    REPORT,
    check_expand_inputs,
    comparison_table,
    expand_configs,
    expand_run,
    ranking_table,
)
from common.launch.cli import (
    check_flag_use,
    comma_ints,
    ensure_writable_dir,
    entry_point,
    folder,
    make_parser,
    names_flag,
    non_negative_int,
    parse_args,
    positive_float,
    positive_int,
    positive_ints,
)
from common.launch.launcher import launch_from_args
from common.presets.expand_decoder import policies_of
from common.runs.run_store import make_specs

# The flags that set a field of the expand preset (common.presets.expand_decoder.ExpandPreset): dest == field.
PRESET_FLAGS = (
    "blocks",
    "policies",
    "seq_len",
    "sequences",
    "batch_size",
    "held_out_tokens",
    "train_steps",
    "train_batch_size",
    "train_lr",
    "n_evals",
)
PLANNER_FLAGS = ("preset", *PRESET_FLAGS, "model", "model_path", "revision", "from_run", "text_file", "save", "device")
SCRIPT_FLAGS = ("seeds", "seed")  # the seeds: --seeds, else the preset's count from --seed


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(__doc__, prog="10_expand_decoder.py")
    group = parser.add_argument_group("the model and the text (one model: --model, --model-path or --from-run)")
    group.add_argument("--model", default=None, help="a Hugging Face causal LM id (or a local folder)")
    group.add_argument("--model-path", default=None, help="a local save_pretrained folder; works offline")
    group.add_argument("--revision", default=None, help="Hub revision (branch, tag or commit) of --model")
    group.add_argument(
        "--from-run", default=None, help="a finished run directory of 05_gpt2_ascend.py (mini: found under --out)"
    )
    group.add_argument(
        "--text-file", default=None, help="the text to probe (and train) on: a file or a folder of .txt/.md/.rst"
    )
    group = parser.add_argument_group("the expansion; None: the preset's value")
    group.add_argument(
        "--blocks", type=positive_ints, default=None, help="K: layers to insert, comma-separated (one run each)"
    )
    group.add_argument(
        "--policy",
        dest="policies",
        type=names_flag(policies_of),
        default=None,
        help="criterion, even, bi, ag (comma-separated)",
    )
    group.add_argument(
        "--save",
        type=folder,
        default=None,
        help="write each expansion here (DIR/<policy>-K<K>: save_pretrained, tokenizer, report)",
    )
    group.add_argument(
        "--seeds", type=comma_ints, default=None, help="seeds, one run per K each (they order the training batches)"
    )
    group.add_argument("--seq-len", type=positive_int, default=None, help="tokens per probe and training window")
    group.add_argument(
        "--sequences", type=positive_int, default=None, help="probe windows (n = sequences x seq-len tokens)"
    )
    group.add_argument("--batch-size", type=positive_int, default=None, help="probe windows per forward/backward")
    group.add_argument("--held-out-tokens", type=positive_int, default=None, help="the text's first tokens, held out")
    group.add_argument(
        "--train-steps", type=non_negative_int, default=None, help="S: steps of the new layers only; 0: none"
    )
    group.add_argument("--train-batch-size", type=positive_int, default=None, help="windows per training step")
    group.add_argument(
        "--train-lr", type=positive_float, default=None, help="AdamW peak learning rate of the new layers"
    )
    group.add_argument("--n-evals", type=positive_int, default=None, help="held-out evaluations over the training")
    return check_flag_use(parser, planner=PLANNER_FLAGS, script=SCRIPT_FLAGS)


@entry_point
def main(argv=None) -> int:
    args = parse_args(build_parser(), argv)
    if args.save is not None and not args.dry_run:  # before any probe: a refused --save creates nothing
        ensure_writable_dir(args.save, flag="--save")
    overrides = {field: getattr(args, field) for field in PRESET_FLAGS}
    if overrides["blocks"] is not None:
        overrides["blocks"] = tuple(overrides["blocks"])
    configs = expand_configs(
        preset=args.preset,
        overrides=overrides,
        seeds=args.seeds,
        seed=args.seed,
        model=args.model,
        model_path=args.model_path,
        revision=args.revision,
        from_run=args.from_run,
        text_path=args.text_file,
        save=args.save,
        out=args.out,
        device=args.device,
    )
    results = launch_from_args(
        expand_run,
        make_specs(configs, args.out),
        args,
        job_kind="probe",
        desc="expand decoder",
        check=check_expand_inputs,
    )
    if results is None:
        return 0
    print(ranking_table(results[0]))
    print()
    print(comparison_table(results))
    print(f"records: {Path(args.out) / EXPERIMENT}")
    saved = sorted({p["saved"]["folder"] for r in results for p in r["policies"].values() if "saved" in p})
    if args.save:  # the last lines: where the checkpoints are (save_pretrained folders, tokenizer and report in each)
        print(f"checkpoints ({len(saved)}, each a save_pretrained folder with its tokenizer and {REPORT}):")
        print("\n".join(f"  {Path(args.save) / name}" for name in saved))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
