"""Shared code of the depth-sufficiency reproduction (arXiv 2608.14664), in layers.

- science: ``probe``, ``projection``, ``tangent``, ``growth``, ``scaling`` and the leaf
  ``precision`` (TF32/HF32 off, where float64 runs): functions of tensors and modules that import
  only each other, to lift into other code;
- ``models/`` and ``data/``: the networks whose residual streams are probed (convolutional and
  fully connected ResNets, GPT-style and Hugging Face decoders) and their data;
- infrastructure: ``runs`` (run records, ``RunSpec``), ``train`` (and ``train_growth``: a model growing
  inside a run), ``device``, ``distributed``,
  ``logs``, ``errors``, ``paper`` (the papers' numbers), ``claims`` (rules from numbers to
  verdicts), ``tables`` (markdown tables) and ``plots`` (one figure per function); the launcher
  ``launch`` with ``slurm``, and the command line ``cli``;
- ``experiments/``: one job module per numbered script (what submitit pickles), and the modules
  they share (``claim_rows`` turns records into the claims report's rows).

Imports point down only: scripts -> experiments and launch; experiments -> training, runs, data,
models, science; science -> science. ``tests/docs_layout/test_layout.py`` checks it.
"""
