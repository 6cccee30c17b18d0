"""Script 10's job: rank a decoder's insertion places by the copied layer's growth value, expand it by K layers under
each policy, check the function, save, and optionally train the new layers (docs/10_expand_decoder.md).

One run per (K, seed), every policy inside it (they share the probe and, when training, the batches). The model
comes from a Hub id (``--model``), a local ``save_pretrained`` folder (``--model-path``), a finished run of
05 (``--from-run``, or the preset's ``ascend_depth`` found under ``--out``: exported to a Hugging Face GPT-2 by
:func:`common.experiments.shared.gpt2_runs.export_run`), or, at the smoke preset, a tiny Llama built here. The run's identity
holds what defines the model and the text (names and sha256 of the files, not their paths: those sit under
``runtime``), so the same model and text give the same run hash on any machine.

A run records per policy (``metrics.jsonl``, one line each, so a killed run keeps the policies it finished) the
places, the copied layers, the function check (and, with ``--save``, the check of the checkpoint reloaded with
``from_pretrained``) and the training curve; ``result.json`` holds the ranking table and every policy's record.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES

from common.data.text_sources import TextDataSpec, documents, text_fingerprint
from common.errors import ParamError, UserError
from common.experiments import expand_decoder_training as training
from common.experiments.expand_decoder_config import ExpandRun
from common.experiments.shared.gpt2_runs import EXPERIMENT as ASCEND
from common.experiments.shared.gpt2_runs import export_run
from common.models.gpt_export import byte_tokenizer
from common.models.hf_decoder import HFDecoder, check_weight_files, is_local, load_causal_lm, sha256_file
from common.models.hf_expand import (
    Reference,
    choose_places,
    copy_decoder,
    copy_source,
    even_places,
    expand_layers,
    expandable,
    function_check,
    place_scores,
)
from common.presets.choose import choose_preset
from common.presets.expand_decoder import ARMS, CONTROLS, PRESETS, ExpandPreset
from common.runs import record_io, run_store
from common.runs.atomic import atomic_write_json
from common.runs.run_store import RunSpec
from common.runs.typed_config import to_mapping
from common.training.checkpoints import WEIGHTS
from common.training.device import resolve_device, seed_everything

EXPERIMENT = "expand_decoder"
REPORT = "expansion_report.json"  # beside each saved checkpoint
TINY = {"family": "llama", "hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4, "intermediate_size": 64}


# ----------------------------------------------------------------------------- where the model comes from
def find_ascend_run(out: str | Path, depth: int, preset: str) -> Path:
    """The finished 05 run of depth ``depth`` and ``preset`` under ``out``; a one-line error naming 05 if none.

    Its weights are not needed to plan (the run's identity names the 05 run, whose config defines its training):
    :func:`check_weights` asks for them before any run starts, so that committed records without weights plan.
    """
    found = [
        d
        for d in run_store.run_dirs(Path(out) / ASCEND)
        if run_store.is_done(d) and {"n_layer": depth, "preset": preset}.items() <= run_store.read_run(d).config.items()
    ]
    if not found:
        raise UserError(
            f"{Path(out) / ASCEND}: no finished 05 run of L = {depth} at --preset {preset}; run 05_gpt2_ascend.py "
            f"--preset {preset} --depths {depth} with the same --out first, or give --from-run DIR"
        )
    return sorted(found)[0]


def check_weights(run: Path) -> None:
    """A 05 run to export must have kept its weights (committed records hold none: 05 retrains them)."""
    if not (run / WEIGHTS).is_file():
        raise UserError(
            f"{run}: this 05 run has no {WEIGHTS} (committed records keep no weights); delete the run directory and "
            "rerun 05_gpt2_ascend.py with the same flags (it trains it again), then this command"
        )


def model_source(
    preset: ExpandPreset,
    *,
    model: str | None,
    model_path: str | None,
    revision: str | None,
    from_run: str | None,
    out,
    preset_name: str = "mini",
) -> tuple[dict, dict]:
    """``(identity, runtime)`` of the model to expand: what defines it, and where it is on this machine."""
    given = [f for f, v in (("--model", model), ("--model-path", model_path), ("--from-run", from_run)) if v]
    if len(given) > 1:
        raise UserError(f"{' and '.join(given)}: give one model to expand")
    if model_path or (model and is_local(model)):
        folder = Path(model_path or model).expanduser()
        check_model_folder(folder)
        files = {p.name: sha256_file(p) for p in check_weight_files(folder)}
        return {"kind": "folder", "name": folder.resolve().name, "weights_sha256": files}, {
            "model_path": str(folder.resolve())
        }
    if model:
        return {"kind": "hub", "model": model, "revision": revision}, {}
    if from_run or preset.ascend_depth is not None:
        run = Path(from_run) if from_run else find_ascend_run(out, preset.ascend_depth, preset_name)
        if not run_store.is_done(run):
            raise UserError(f"--from-run {run}: not a finished run of 05_gpt2_ascend.py (no result.json); run 05 first")
        stored = run_store.read_run(run).config
        if stored.get("experiment") != ASCEND:
            raise UserError(f"--from-run {run}: a run of {stored.get('experiment')}, not of 05_gpt2_ascend.py")
        return {"kind": ASCEND, "run": run.name}, {"from_run": str(run.resolve())}
    if preset.tiny:
        return {"kind": "tiny", **TINY, "seed": 0}, {}
    raise UserError("no model to expand: give --model ID, --model-path DIR or --from-run DIR (a finished 05 run)")


def check_model_folder(folder: Path) -> None:
    """A local folder that ``AutoModelForCausalLM`` can load: it exists, its config is a causal LM's, its weights read."""
    if not folder.is_dir():
        raise UserError(f"--model-path {folder}: no such directory; give a folder written by save_pretrained")
    if not (folder / "config.json").is_file():
        raise UserError(f"--model-path {folder}: no config.json; give a folder written by save_pretrained")
    try:
        config = AutoConfig.from_pretrained(folder)
    except (OSError, ValueError, KeyError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise UserError(f"--model-path {folder}: transformers cannot read its config.json ({reason})") from None
    encoder = config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(config, "is_decoder", False)
    if config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or encoder:  # BERT & co.: causal only as decoders
        raise UserError(
            f"--model-path {folder}: a {config.model_type} model ({type(config).__name__}) is not a causal LM; "
            "10 expands decoders that AutoModelForCausalLM loads (GPT-2, GPT-NeoX, Llama, Qwen2, Mistral, Phi, ...)"
        )
    check_weight_files(folder)


def source_layers(identity: dict, runtime: dict) -> int | None:
    """The model's layer count L where it is known before loading (None for a Hub id)."""
    if identity["kind"] == "folder":
        return int(AutoConfig.from_pretrained(runtime["model_path"]).num_hidden_layers)
    if identity["kind"] == ASCEND:
        return int(run_store.read_run(Path(runtime["from_run"])).config["n_layer"])
    if identity["kind"] == "tiny":
        return int(identity["num_hidden_layers"])
    return None


def load_source(run: ExpandRun, scratch: Path):
    """``(lm, tokenizer, record)`` of the run's model (float32, eval mode); ``scratch``: a folder for an export."""
    ident, runtime = run.model, run.runtime
    if ident["kind"] == "tiny":
        torch.manual_seed(ident["seed"])
        tok = byte_tokenizer()
        cfg = {k: v for k, v in ident.items() if k not in ("kind", "family", "seed")}
        lm = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), max_position_embeddings=4 * run.seq_len, **cfg))
        return lm.eval(), tok, {"model": "tiny-llama", "model_class": type(lm).__name__}
    if ident["kind"] == ASCEND:
        source = Path(runtime.from_run)
        check_weights(source)
        loaded = load_causal_lm(str(export_run(source, scratch / "base_model")))
        record = {
            **loaded.record,
            "model": f"{ASCEND}/{ident['run']}",
            "run_weights_sha256": sha256_file(source / WEIGHTS),
        }
        return loaded.model.eval(), loaded.tokenizer, record
    name = runtime.model_path if ident["kind"] == "folder" else ident["model"]
    loaded = load_causal_lm(name, revision=ident.get("revision"))
    if ident["kind"] == "folder":
        if loaded.record["weight_files"] != ident["weights_sha256"]:
            raise UserError(f"--model-path {name}: its weight files changed since this run was planned; plan it again")
        loaded.record["model"] = ident["name"]
    return loaded.model.eval(), loaded.tokenizer, loaded.record


# ----------------------------------------------------------------------------- the text
def text_source(preset: ExpandPreset, text_path: str | None, model_runtime: dict) -> tuple[dict, dict]:
    """``(identity, runtime)`` of the text: ``--text-file``, else the 05 run's own text, else (smoke) CPython's help."""
    if text_path is None and "from_run" in model_runtime:
        stored = run_store.read_run(Path(model_runtime["from_run"])).config.get("runtime", {}).get("text_path")
        text_path = stored if stored and Path(stored).exists() else None
        if text_path is None:
            raise UserError(
                "--text-file F is needed: the 05 run's text is not on this machine; give the file 05 trained on"
            )
    if text_path is not None:
        return {"source": "text", **text_fingerprint(text_path)}, {"text_path": str(Path(text_path).resolve())}
    if preset.tiny:
        return {"source": "python-docs"}, {}
    raise UserError("--text-file F is needed: the text the model is probed (and trained) on")


def read_text(run: ExpandRun) -> str:
    """The run's text (:func:`common.data.text_sources.documents`: a ``--text-file``'s fingerprint is checked
    against the identity, so a file changed since planning is one line), its documents joined by blank lines."""
    text = run.text
    spec = TextDataSpec(text.source, "model", 1, None, text_name=text.text_name, text_sha256=text.text_sha256)
    return "\n\n".join(documents(spec, text_path=run.runtime.text_path))


def text_split(run: ExpandRun, tokenizer) -> training.TextSplit:
    ids = tokenizer(read_text(run), add_special_tokens=False, verbose=False)["input_ids"]
    return training.split_tokens(
        torch.tensor(ids, dtype=torch.long),
        held_out_tokens=run.held_out_tokens,
        seq_len=run.seq_len,
        sequences=run.sequences,
        batch_size=run.batch_size,
        what=f"the text {run.text.text_name if run.text.text_name is not None else run.text.source}",
    )


# ----------------------------------------------------------------------------- the plan
def expand_configs(
    *,
    preset: str = "smoke",
    overrides: dict | None = None,
    seeds: Sequence[int] | None = None,
    seed: int = 0,
    model: str | None = None,
    model_path: str | None = None,
    revision: str | None = None,
    from_run: str | None = None,
    text_path: str | None = None,
    save: str | None = None,
    out: str | Path = "results",
    device: str = "auto",
) -> list[dict]:
    """One config per (K, seed): ``seeds``, else the preset's ``seeds`` count from ``seed``; ``overrides``: preset fields."""
    p = choose_preset(PRESETS, preset, overrides)
    ident, model_runtime = model_source(
        p, model=model, model_path=model_path, revision=revision, from_run=from_run, out=out, preset_name=preset
    )
    text, text_runtime = text_source(p, text_path, model_runtime)
    layers = source_layers(ident, model_runtime)
    for k in p.blocks:
        if layers is not None and k > layers:
            raise ParamError("blocks", k, f"the model has {layers} layers: give 1..{layers} (one copy per layer)")
    seeds = list(seeds) if seeds is not None else [seed + i for i in range(p.seeds)]
    runtime = {
        **model_runtime,
        **text_runtime,
        "device": device,
        **({"save": str(Path(save).resolve())} if save else {}),
    }
    keys = {f: getattr(p, f) for f in ("seq_len", "sequences", "batch_size", "held_out_tokens")}
    train = {f: getattr(p, f) for f in ("train_steps", "train_batch_size", "train_lr", "n_evals")}
    name = ident.get("name") or ident.get("run") or ident.get("model") or ident["kind"]
    configs = [
        {
            "experiment": EXPERIMENT,
            "name": f"{str(name).replace('/', '_')}-K{k}-seed{s}",
            "preset": preset,
            "model": ident,
            "text": text,
            "blocks": k,
            "seed": s,
            "policies": list(p.policies),
            **keys,
            **train,
            "runtime": dict(runtime),
        }
        for k in p.blocks
        for s in seeds
    ]
    if save:
        runs = [ExpandRun.from_config(c) for c in configs]
        check_save(Path(save), runs)
        check_finished_saved(Path(save), runs, configs, out)
    return configs


def check_finished_saved(save: Path, runs: Sequence[ExpandRun], configs: Sequence[dict], out) -> None:
    """A finished run is skipped, so it writes no checkpoint: with a ``--save`` folder that lacks its expansions it is
    refused in one line (its first execution saved them where it was told, if anywhere). ``runs``: ``configs`` typed."""
    for run, config in zip(runs, configs, strict=True):
        missing = [p for p in run.policies if p not in CONTROLS and not (save_folder(run, p) / REPORT).is_file()]
        if missing and run_store.is_done(done := run_store.run_dir(out, config)):
            raise UserError(
                f"--save {save}: run {done.name} is finished and its expansions ({', '.join(missing)}) are not in this "
                f"folder; pass the --save folder it first ran with, or delete {done} to run it again and save here"
            )


def save_folder(run: ExpandRun, policy: str) -> Path:
    """Where ``--save DIR`` puts one expansion: ``DIR/<policy>-K<K>`` (the expansion does not depend on the seed)."""
    return Path(run.runtime.save) / f"{policy}-K{run.blocks}"


def check_save(save: Path, runs: Sequence[ExpandRun]) -> None:
    """``--save DIR``: a new or empty folder, or one holding only this plan's checkpoints (a rerun resumes)."""
    if save.exists() and not save.is_dir():
        raise UserError(f"--save {save}: a file, not a folder; give a new folder")
    if not save.is_dir():
        return
    own = {save_folder(r, policy).name for r in runs for policy in r.policies if policy not in CONTROLS}
    parts = tuple(f".{name}." for name in own)  # a save killed mid-write: its folder is written again beside it
    other = sorted(
        p.name
        for p in save.iterdir()
        if (p.name not in own or not (p / REPORT).is_file()) and not p.name.startswith(parts)
    )
    if other:
        raise UserError(
            f"--save {save}: the folder holds other content ({', '.join(other[:3])}{', ...' if len(other) > 3 else ''}); "
            "give a new or empty folder"
        )


def check_expand_inputs(configs: list[dict]) -> None:
    """Before any run directory: the model loads and its layout can be expanded, and the text is long enough for the
    split (read with the model's tokenizer)."""
    seen = set()
    for run in (ExpandRun.from_config(c) for c in configs):
        key = json.dumps([run.model, to_mapping(run.text), run.held_out_tokens, run.seq_len, run.sequences])
        if key in seen:
            continue
        seen.add(key)
        with tempfile.TemporaryDirectory() as scratch:
            lm, tokenizer, _ = load_source(run, Path(scratch))
            expandable(HFDecoder(lm))
            text_split(run, tokenizer)


# ----------------------------------------------------------------------------- the job
def expand_run(spec: RunSpec) -> dict:
    """Job function of script 10: the ranking, then each policy's expansion, check, checkpoint and training; resumes
    at the policy it was in (finished policies are read back from ``metrics.jsonl``)."""
    run = ExpandRun.from_config(spec.config)
    path = run_store.prepare_run(spec.out, spec.config)
    device = resolve_device(run.runtime.device or "auto")
    seed_everything(run.seed)
    with tempfile.TemporaryDirectory() as scratch:
        lm, tokenizer, record = load_source(run, Path(scratch))
        decoder = HFDecoder(lm.float().to(device)).eval()
        split = text_split(run, tokenizer)
        probe = [(x.to(device), y.to(device)) for x, y in split.probe]
        scores = place_scores(decoder, probe)
        reference = Reference.of(decoder, probe)
        base = training.held_out_loss(decoder, split) if run.train_steps else None
        done = (
            {r["policy"]: r for r in run_store.read_metrics(path) if "policy" in r}
            if (path / run_store.METRICS).exists()
            else {}
        )
        for policy in run.policies:
            if policy not in done:
                done[policy] = _expand_policy(decoder, scores, policy, run, probe, reference, split, tokenizer)
                run_store.append_metrics(path, done[policy])
        policies = {policy: done[policy] for policy in run.policies}
    result = {
        "blocks": run.blocks,
        "seed": run.seed,
        "n_layer": decoder.n_layer,
        "train_steps": run.train_steps,
        "model": record,
        "base_held_out_loss": base,
        "ranking": [s.record() for s in scores],
        "policies": policies,
    }
    run_store.write_result(path, result)
    return result


def _expand_policy(decoder, scores, policy: str, run: ExpandRun, probe, reference, split, tokenizer) -> dict:
    if policy in CONTROLS:
        return _control(decoder, run, probe, reference, split)
    places = choose_places(policy, scores, run.blocks)
    expanded = copy_decoder(decoder)
    sources = expand_layers(expanded, places)
    check = function_check(expanded, probe, reference)
    if not check["passed"]:
        raise UserError(
            f"{type(decoder.lm).__name__}: the expansion at places {places} changed the function (max |logits diff| "
            f"{check['max_abs_logit_diff']:.3g}, greedy tokens equal: {check['greedy_equal']}); this architecture cannot be "
            "expanded by zeroing its output projections"
        )
    rec = {
        "policy": policy,
        "places": places,
        "sources": sources,
        "new_layers": new_indices(places),
        "function_check": check,
    }
    if run.runtime.save:
        rec["saved"] = save_expansion(expanded, tokenizer, save_folder(run, policy), rec, scores, run, probe, reference)
    return {**rec, **_trained(expanded, rec["new_layers"], run, split)}


def _control(decoder: HFDecoder, run: ExpandRun, probe, reference, split) -> dict:
    """The ``none`` arm: the unexpanded model (a copy) with the K layers that LLaMA Pro's even spacing would copy
    trained alone, the same steps on the same batches as every policy: the training without the added depth."""
    model = copy_decoder(decoder)
    layers = sorted({copy_source(p, decoder.n_layer) for p in even_places(decoder.n_layer, run.blocks)})
    rec = {"policy": "none", "places": [], "sources": [], "new_layers": [], "trained_layers": layers}
    return {**rec, "function_check": function_check(model, probe, reference), **_trained(model, layers, run, split)}


def _trained(model: HFDecoder, layers: list[int], run: ExpandRun, split) -> dict:
    """``training`` (the curve) and ``held_out_loss`` after ``run.train_steps`` steps of ``model.blocks[layers]``
    alone (empty and None without training steps)."""
    if not run.train_steps:
        return {"training": [], "held_out_loss": None}
    kwargs = dict(steps=run.train_steps, batch_size=run.train_batch_size, lr=run.train_lr, n_evals=run.n_evals)
    curve = training.train_new_layers(model, layers, split, **kwargs, seed=run.seed)
    return {"training": curve, "held_out_loss": curve[-1]["held_out_loss"]}


def new_indices(places: Sequence[int]) -> list[int]:
    """The copies' indices in the expanded model: place ``p_j`` (ascending, original numbering) becomes ``p_j + j``."""
    return [p + j for j, p in enumerate(sorted(places))]


def save_expansion(
    expanded: HFDecoder, tokenizer, folder: Path, rec: dict, scores, run: ExpandRun, probe, reference
) -> dict:
    """``save_pretrained`` of the expansion and its tokenizer into ``folder`` (written beside it, then renamed), with
    the report; then the checkpoint reloaded by ``AutoModelForCausalLM.from_pretrained`` and checked again."""
    if (folder / REPORT).is_file():  # another seed's run of the same K wrote the same expansion
        return {"folder": folder.name, "reloaded_check": record_io.read_json(folder / REPORT)["reloaded_check"]}
    folder.parent.mkdir(parents=True, exist_ok=True)
    part = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        expanded.lm.save_pretrained(part)
        tokenizer.save_pretrained(part)
        reloaded = HFDecoder(
            AutoModelForCausalLM.from_pretrained(part, dtype=torch.float32).to(reference.prompt.device)
        )
        again = function_check(reloaded, probe, reference)
        report = {
            "model": run.model,
            "blocks": run.blocks,
            "policy": rec["policy"],
            "places": rec["places"],
            "copied_from": rec["sources"],
            "new_layers": rec["new_layers"],
            "n_layer": len(expanded.blocks),
            "ranking": [s.record() for s in scores],
            "function_check": rec["function_check"],
            "reloaded_check": again,
        }
        atomic_write_json(part / REPORT, report)
        try:
            part.rename(folder)
        except OSError:  # another seed's run of the same K renamed the same expansion into place first
            if not (folder / REPORT).is_file():
                raise
    finally:
        shutil.rmtree(part, ignore_errors=True)
    return {"folder": folder.name, "reloaded_check": again}


# ----------------------------------------------------------------------------- the tables
def ranking_table(result: dict) -> str:
    """The places of one run, markdown: V_S,l, AG_l, BI, k, n and which policies chose each."""
    chosen = {
        p: [name for name, r in result["policies"].items() if p in r["places"]] for p in range(result["n_layer"] + 1)
    }
    lines = ["| place | copy of | V_S,l | AG_l | BI | k | n | chosen by |", "|---|---|---|---|---|---|---|---|"]
    for s in result["ranking"]:
        bi = "-" if s["bi"] is None else f"{s['bi']:.4g}"
        lines.append(
            f"| {s['place']} | layer {s['source']} | {s['growth_value']:.4g} | {s['ag']:.4g} | {bi} | {s['k']} | {s['n']} "
            f"| {', '.join(chosen[s['place']]) or '-'} |"
        )
    return "\n".join(lines)


def comparison_table(results: Sequence[dict]) -> str:
    """Held-out loss after training per policy (mean and spread over seeds), per K; and the function checks."""
    lines = [
        "| K | policy | places | max abs logit diff | greedy equal | held-out loss (mean ± sd over seeds) |",
        "|---|---|---|---|---|---|",
    ]
    for k in sorted({r["blocks"] for r in results}):
        group = [r for r in results if r["blocks"] == k]
        for policy in [p for p in ARMS if p in group[0]["policies"]]:
            recs = [r["policies"][policy] for r in group]
            losses = [x["held_out_loss"] for x in recs if x["held_out_loss"] is not None]
            spread = statistics.stdev(losses) if len(losses) > 1 else 0.0
            loss = f"{statistics.mean(losses):.4f} ± {spread:.4f} (n = {len(losses)})" if losses else "not trained"
            diff = max(x["function_check"]["max_abs_logit_diff"] for x in recs)
            equal = all(x["function_check"]["greedy_equal"] for x in recs)
            where = f"none (trains layers {recs[0]['trained_layers']})" if policy in CONTROLS else recs[0]["places"]
            lines.append(f"| {k} | {policy} | {where} | {diff:.3g} | {equal} | {loss} |")
    return "\n".join(lines)
