"""The claim rules by family, with their verdicts, margins and statistics; :mod:`common.claims` gathers them.

Infrastructure: pure functions of numbers, importing nothing of the experiments (docs/design.md, section
"Import layering").
"""
