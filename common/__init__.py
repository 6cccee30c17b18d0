"""Shared code of the depth-sufficiency reproduction (arXiv 2608.14664): one folder per layer, from the bottom.

- ``science/``: the paper's quantities on any model (AG_l, V_S,l, insertion, App. G, Cohen et al.'s statistics);
- ``runs/``: run directories and records; ``training/``: the loop and what it runs on; ``data/`` and ``models/``;
- ``presets/``: one file per script (and the papers' numbers); ``launch/``: the command line and the launcher;
- ``experiments/``: one job module per numbered script, its helpers beside it, ``shared/`` below them all;
- ``report/``: 08's records, claim rows and rules, figures; ``power/``: the rules' simulated error rates;
- ``errors.py``: the one exception type for a user's mistake.

docs/design.md, section "Import layering" says what each layer may import; ``tests/docs_layout/test_layout.py`` checks it.
"""
