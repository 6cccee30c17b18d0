"""What the claims report (script 08) and the rules' simulation take from each preset, as data.

A preset's verdicts may carry a scale note and its report a banner; the commands a report names leave ``--preset``
out for the scripts' default preset; the design the rules are simulated at takes 06's default depths (the paper's
four, or every finished depth of the sweep). A preset not listed here (records of a preset of one's own) is
:data:`UNLISTED`: unmarked, named with ``--preset``, 06 at every depth of the sweep.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.presets.train_resnet_sweep import CIFAR_PAPER, GPU_HOUR, GPU_HOUR_SEEDS

SMOKE_NOTE = "smoke scale: not evidence about the paper"
MINI_NOTE = "mini scale"  # every verdict of --preset mini records carries it (docs/decisions.md)
GPU_HOUR_NOTE = "gpu-hour scale"  # every verdict of --preset gpu-hour records: the paper's data, fewer epochs, depths


@dataclass(frozen=True)
class ReportPreset:
    """The report's and the simulation's fields of one preset."""

    scale_note: str | None = None  # after every verdict of the preset's records; None: unmarked (the paper preset)
    banner: str | None = None  # the fixed banner atop its claims report (a Markdown quote's text)
    records_banner: bool = False  # the banner is written from the records: how many images, seeds, which copy (mini)
    script_default: bool = False  # the scripts' default --preset: the commands a report names leave the flag out
    matched_paper_depths: bool = False  # 06's default depths are the paper's four, else every finished sweep depth
    weight_scaling_preset: str | None = None  # 07's preset the rules' simulation takes (None: the preset's own)

    def preset_flag(self, name: str) -> str:
        """`` --preset <name>`` in a command that makes the preset's records ("" for the scripts' default)."""
        return "" if self.script_default else f" --preset {name}"


REPORTS = {
    "smoke": ReportPreset(
        scale_note=SMOKE_NOTE,
        banner="**Smoke scale.** Every record below comes from `--preset smoke` (tiny offline data, minutes on a CPU). "
        f"The verdicts test the code path, not the paper: {SMOKE_NOTE}.",
    ),
    "mini": ReportPreset(scale_note=MINI_NOTE, records_banner=True),
    "paper": ReportPreset(script_default=True, matched_paper_depths=True),
    "gpu-hour": ReportPreset(
        scale_note=GPU_HOUR_NOTE,
        banner="**GPU-hour scale.** Every record below comes from `--preset gpu-hour`: all 50,000 CIFAR-10 training "
        f"images at the paper's recipe for {GPU_HOUR.recipe.epochs} of its {CIFAR_PAPER.recipe.epochs} epochs, "
        f"N = {GPU_HOUR.depths[0]}..{GPU_HOUR.depths[-1]} x {GPU_HOUR_SEEDS} seeds (scripts 01, 02, 03, 06). The "
        f"verdicts are evidence at that scale, not at the paper's 200 epochs and N = 0..100: {GPU_HOUR_NOTE}.",
        matched_paper_depths=True,
        weight_scaling_preset="paper",  # 07 has no gpu-hour preset: its rules are simulated at the paper's design
    ),
}
UNLISTED = ReportPreset()


def report_preset(name: str) -> ReportPreset:
    """The report's fields of the preset called ``name`` (:data:`UNLISTED` for a preset not in :data:`REPORTS`)."""
    return REPORTS.get(name, UNLISTED)
