"""Job module of ``01_train_resnet_sweep.py``: the summary table of the ResNet depth sweep (paper B.1-B.3).

The sweep itself (presets, run configs, the job function :func:`common.experiments.shared.resnet_sweep.train_resnet_run`
and the records API that scripts 02, 03, 06 and 07 read finished runs through) lives in
``common/experiments/shared/resnet_sweep.py``, below every job module; this module keeps what only script 01 uses.
"""

from __future__ import annotations

from collections.abc import Sequence

# What every sweep run's result.json holds (common.experiments.shared.resnet_sweep.train_resnet_run); the summary table reads them.
RESULT_KEYS = ("depth_n", "depth_label", "params", "train_loss", "train_acc", "test_loss", "test_acc", "epochs", "seed")


def summary_table(results: Sequence[dict]) -> str:
    """Fixed-width table of finished runs: N, ResNet-d, params, final losses/accuracies, wall time."""
    header = f"{'N':>4} {'model':<11} {'params':>9} {'train_loss':>10} {'train_acc':>9} {'test_loss':>9} {'test_acc':>8} {'seed':>4} {'wall':>8}"
    lines = [header, "-" * len(header)]
    for r in sorted(results, key=lambda r: (r["depth_n"], r["seed"])):
        lines.append(
            f"{r['depth_n']:>4} {'ResNet-' + str(r['depth_label']):<11} {r['params']:>9,} {r['train_loss']:>10.4f} "
            f"{r['train_acc']:>9.4f} {r['test_loss']:>9.4f} {r['test_acc']:>8.4f} {r['seed']:>4} {_hms(r.get('wall_s', 0.0)):>8}"
        )
    return "\n".join(lines)


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


__all__ = ["RESULT_KEYS", "summary_table"]
