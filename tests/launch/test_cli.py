"""common/launch/cli.py: shared flags and one-line errors with exit code 2 (checked in a real process)."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from common.errors import ParamError
from common.launch.cli import entry_point, make_parser, parse_args
from common.runs import run_store
from tests.helpers.jobs import demo_configs

ROOT = Path(__file__).resolve().parents[2]


def run_demo(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from tests.helpers.jobs import demo_main; raise SystemExit(demo_main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--preset", "huge"], ["--preset", "smoke", "paper"]),
        (["--device", "tpu"], ["--device", "cuda"]),
        (["--launcher", "kubernetes"], ["--launcher", "slurm"]),
        (["--xs", "1;2"], ["--xs", "1:100"]),
    ],
)
def test_unknown_flag_values_give_one_line_and_exit_2(args, needles, tmp_path):
    assert_one_line_error(run_demo(*args, "--out", str(tmp_path)), *needles)


def test_unwritable_out_gives_one_line_and_exit_2(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = run_demo("--out", str(blocker / "runs"))
    assert_one_line_error(proc, "--out", "writable directory")


def test_corrupt_config_gives_one_line_exit_2_and_nothing_finished(tmp_path):
    config = demo_configs([1])[0]
    path = run_store.prepare_run(tmp_path, config)
    (path / "config.json").write_text("{oops")
    proc = run_demo("--out", str(tmp_path), "--xs", "1,2")
    assert_one_line_error(proc, "corrupt", "delete")
    assert not run_store.is_done(path)


def test_help_and_dry_run(tmp_path):
    assert run_demo("--help").returncode == 0
    proc = run_demo("--dry-run", "--out", str(tmp_path / "never"))
    assert proc.returncode == 0 and "3 planned runs" in proc.stdout
    assert not (tmp_path / "never").exists()


NUMBERED_SCRIPTS = sorted(p.name for p in ROOT.glob("[0-9][0-9]_*.py"))
SHARED_FLAGS = ("--preset", "--out", "--seed", "--device", "--launcher", "--dry-run", "--slurm-profile")
READER_FLAGS = ("--preset", "--out", "--dry-run")  # 08 reads records and launches nothing


@pytest.mark.parametrize("script", NUMBERED_SCRIPTS)
def test_every_numbered_script_explains_the_shared_flags(script, capsys):
    # --help in this process (argparse prints and exits 0). Bad values, in-process and in real processes:
    # tests/launch/test_bad_inputs.py.
    main = importlib.import_module(Path(script).stem).main
    with pytest.raises(SystemExit) as exit_help:
        main(["--help"])
    assert exit_help.value.code == 0
    help_text = capsys.readouterr().out
    for flag in READER_FLAGS if script.startswith("08") else SHARED_FLAGS:
        assert flag in help_text, f"{script} --help does not explain {flag}"


def test_a_parameter_error_names_the_parameter_in_python_and_its_flag_on_the_command_line(tmp_path, capsys):
    error = ParamError("train_subset", 7, "below the 10 classes; give at least 10")
    assert str(error) == "train_subset=7: below the 10 classes; give at least 10"

    @entry_point
    def main(argv=None) -> int:
        parser = make_parser("demo", launches=False)
        parser.add_argument("--train-subset", type=int)
        args = parse_args(parser, [*argv, "--out", str(tmp_path)])
        raise ParamError("train_subset", args.train_subset, "below the 10 classes; give at least 10")

    assert main(["--train-subset", "7"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["test_cli.py: error: --train-subset 7: below the 10 classes; give at least 10"]
