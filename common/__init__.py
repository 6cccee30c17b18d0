"""Shared code of the depth-sufficiency reproduction (arXiv 2608.14664), layered (DESIGN.md section 5).

- science: ``probe``, ``projection``, ``tangent``, ``growth`` (and ``scaling``): pure functions
  of tensors and modules that import nothing else from this package, to lift into other code;
- ``models/`` and ``data/``: the networks whose residual streams are probed, and their data;
- infrastructure: ``runs`` (run records, ``RunSpec``), ``train``, ``device``, ``distributed``,
  ``logs``, ``errors``, ``paper``, ``tables`` (markdown tables); the launcher ``launch`` with ``slurm`` and the command line ``cli``;
- ``experiments/``: one job module per numbered script, everything submitit pickles.

Imports point down only: scripts -> experiments and launch; experiments -> training, runs,
data, models, science; ``tests/test_layout.py`` checks it.
"""
