"""Trivial job functions and a demo command line for the launcher and CLI tests.

They live in an importable module (not a test file) because submitit pickles jobs by reference.
"""

from __future__ import annotations

import os

from common import runs
from common.cli import comma_ints, entry_point, make_parser, parse_args
from common.launch import launch_from_args, make_specs


def square_job(spec) -> dict:
    """Record ``x`` and ``x**2``; one metrics line per execution (to count re-runs)."""
    path = runs.prepare_run(spec.out, spec.config)
    runs.append_metrics(path, {"x": spec.config["x"], "pid": os.getpid()})
    result = {"x": spec.config["x"], "y": spec.config["x"] ** 2}
    runs.write_result(path, result)
    return result


def failing_job(spec) -> dict:
    runs.prepare_run(spec.out, spec.config)
    raise RuntimeError(f"deliberate failure in {spec.config['name']}")


def demo_configs(xs) -> list[dict]:
    return [{"experiment": "demo", "name": f"x{x}", "x": x} for x in xs]


@entry_point
def demo_main(argv=None) -> int:
    parser = make_parser("demo sweep for the CLI tests")
    parser.add_argument("--xs", type=comma_ints, default=[1, 2, 3])
    args = parse_args(parser, argv)
    specs = make_specs(demo_configs(args.xs), args.out)
    launch_from_args(square_job, specs, args)
    return 0
