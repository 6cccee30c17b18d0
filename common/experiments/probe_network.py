"""Job module of ``11_probe_network.py``: the paper's question on one's own network (is it deep enough?).

:func:`network_configs` plans one run (experiment ``probe_network``; identity: the model (its name and the sha256 of
its weights), the data (its name, and the sha256 of a file), every probe setting, ``--places`` when given, and the
seed; the paths sit under ``runtime``). :func:`check_network_inputs` loads and checks everything the run will read
before any run folder exists (the model, its weights, the examples, and the probe's own checks with script 11's flags
named: :func:`script_names`). :func:`probe_network_run` loads the model and the examples
(:mod:`common.experiments.probe_network_inputs`), probes every place with
:func:`common.models.probe_network.probe_network` (``AG_l``, ``V_S,l`` pooled, the guard rails), runs App. G's
separated saturation test on an independent sample (a calibration part for the traces, a test part for
``Gamma_hat``: Theorem 3's interval and verdict, the asymptotic interval beside it; docs/design.md, sections "App. G:
saturation interval and verdicts" and "App. G: the asymptotic interval beside it") and writes ``places.csv`` (one row
per place, the best first), ``places.png`` / ``places.pdf`` and ``result.json`` (last), each atomically.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import torch

from common.errors import UserError
from common.experiments.probe_network_inputs import data_spec, load_inputs, model_spec
from common.experiments.probe_network_report import write_figure
from common.models.probe_network import prepare, probe_network
from common.models.probe_network_checks import Names
from common.presets.choose import choose_preset
from common.presets.probe_network import PRESETS
from common.runs import atomic, run_store
from common.science.saturation import asymptotic_interval, linear_variance_estimate, saturation_interval
from common.training.device import resolve_device

log = logging.getLogger(__name__)

EXPERIMENT = "probe_network"
PLACES_CSV = "places.csv"


def network_configs(
    *,
    preset: str = "paper",
    overrides: dict | None = None,
    model: str | None = None,
    weights: str | None = None,
    model_path: str | None = None,
    data: str | None = None,
    text_file: str | None = None,
    places: str | None = None,
    seed: int = 0,
    device: str = "auto",
) -> list[dict]:
    """The one run that probes the model and the data given (smoke without them: the small ResNet, synthetic images)
    at ``places`` (None: ``"auto"``; names or patterns, part of the run's identity when given)."""
    p = choose_preset(PRESETS, preset, overrides)
    model_id, model_runtime = model_spec(model, weights, model_path, p.smoke)
    data_id, data_runtime = data_spec(data, text_file, p.smoke)
    if (model_id["source"] == "hf") != (data_id["source"] == "text"):
        raise UserError(
            "a Hugging Face model (--model-path) reads a text (--text-file), an image model images (--data); "
            f"got a {model_id['source']} model and {data_id['source']} data"
        )
    probe = {k: v for k, v in dataclasses.asdict(p).items() if k != "smoke"}
    if places is not None:
        if not places.strip(" ,"):
            raise UserError(f"--places {places!r} names nothing; give module names or patterns (--places 'blocks.*')")
        probe["places"] = places
    return [
        {
            "experiment": EXPERIMENT,
            "name": f"{model_id['name']}-{data_id['name']}",
            "preset": preset,
            "model": model_id,
            "data": data_id,
            "probe": probe,
            "seed": seed,
            "runtime": {"device": device, **model_runtime, **data_runtime},
        }
    ]


def on_device(batches: list | None, device: torch.device) -> list | None:
    if batches is None:
        return None
    move = lambda t: t.to(device) if isinstance(t, torch.Tensor) else t  # noqa: E731
    return [{k: move(v) for k, v in b.items()} if isinstance(b, dict) else tuple(map(move, b)) for b in batches]


def script_names(config: dict, app_g: bool = False) -> Names:
    """How the probe's refusals name script 11's flags (the data's flag, and what sizes the sample)."""
    data = config["data"]
    where = {"text": "--text-file", "npz": "--data", "folder": "--data"}.get(data["source"])
    return Names(
        places="--places NAMES: module names or patterns, e.g. --places 'blocks.*'",
        exact="--no-exact (AG_l only)",
        data=f"{where} {data['name']}" if where else "the smoke preset's synthetic images",
        batches="a smaller --app-g-n" if app_g else "a smaller --batch-size or fewer --n-batches",
    )


def probe_network_run(spec) -> dict:
    """Job function of script 11: probe the model, run App. G, write the records (module docstring)."""
    config = spec.config
    path = run_store.prepare_run(spec.out, config)
    device = resolve_device(config["runtime"].get("device") or "auto")
    p, seed = config["probe"], config["seed"]
    model, examples = load_inputs(config)
    model = model.to(device)
    probe = probe_network(
        model,
        on_device(examples.analysis, device),
        p.get("places", "auto"),
        exact=p["exact"],
        per_batch=p["per_batch"],
        seed=seed,
        progress=log.info,
        names=script_names(config),
    )
    app_g = app_g_test(model, examples, on_device(examples.cal, device), on_device(examples.test, device), config)
    records = probe.ranking()
    atomic.atomic_write_csv(path / PLACES_CSV, records)
    figures = write_figure(path, records, f"{config['model']['name']} on {config['data']['name']}")
    out = {
        "model": config["model"],
        "data": config["data"],
        "samples": examples.record,
        **probe.summary(),
        "places": records,
        "app_g": app_g,
        "files": [PLACES_CSV, *(f.name for f in figures)],
    }
    run_store.write_result(path, out)
    return out


def app_g_test(model, examples, cal: list | None, test: list | None, config: dict) -> dict | None:
    """App. G on the independent sample: Theorem 3's interval on the test part's ``||C_hat_l||`` with the calibration
    part's traces, and the asymptotic interval beside it (the calibration part's variance along the test part's
    ``C_hat_l``); None without a sample."""
    if test is None:
        return None
    p, seed = config["probe"], config["seed"]
    n_cal, n_test = examples.record["n_cal"], examples.record["n_test"]
    places, names = p.get("places", "auto"), script_names(config, app_g=True)
    tested = probe_network(model, test, places, exact=False, seed=seed, contributions=True, names=names).result
    traced = probe_network(
        model,
        cal,
        places,
        exact=False,
        seed=seed,
        contributions=True,
        contribution_directions=tested.cross_gradients,
        names=names,
    ).result
    names = [s.name for s in tested.scores]
    interval = saturation_interval(
        [s.cross_gradient_norm_pooled for s in tested.scores],
        [s.contribution_cov_trace for s in traced.scores],
        n=n_test,
        alpha=p["app_g_alpha"],
        delta=p["app_g_delta"],
        names=names,
    )
    v2 = [s.contribution_cov_sq_trace for s in tested.scores]
    asymptotic = None
    if all(v is not None for v in v2):
        v1 = [
            linear_variance_estimate(c.contribution_direction_variance, v, n_test)
            for c, v in zip(traced.scores, v2, strict=True)
        ]
        u = [s.contribution_norm_sq for s in tested.scores]
        asymptotic = asymptotic_interval(
            u, v1, v2, n=n_test, alpha=p["app_g_alpha"], dof=n_cal - 1, delta=p["app_g_delta"], names=names
        ).as_record()
    return {"theorem3": interval.as_record(), "asymptotic": asymptotic, "n_cal": n_cal, "n_test": n_test}


def check_network_inputs(configs: list[dict]) -> None:
    """Before any run directory is made (:func:`common.launch.launcher.check_before_creating`): each config's model,
    weights and examples load, and the probe's own checks pass on them (the places, the batches, the labels, the
    loss, the memory of the exact probe and of App. G's: :func:`common.models.probe_network.prepare`), each refusal
    one line naming script 11's flag."""
    for config in configs:
        for key in ("weights", "model_path", "data"):
            where = config["runtime"].get(key)
            if where and not Path(where).exists():
                raise UserError(f"{where} is gone since the run was planned; give the file again")
        device = resolve_device(config["runtime"].get("device") or "auto")
        model, examples = load_inputs(config)
        model, p = model.to(device), config["probe"]
        places = p.get("places", "auto")
        prepare(model, on_device(examples.analysis, device), places, exact=p["exact"], names=script_names(config))
        if examples.test is not None:
            names = script_names(config, app_g=True)
            for part, direction in ((examples.test, False), (examples.cal, True)):
                prepare(model, on_device(part, device), places, contributions=True, direction=direction, names=names)
