"""Run records on disk: a run is a pure function of its config (docs/runs.md).

- :mod:`common.runs.run_store`: a run's directory from its config (``<out>/<experiment>/<name>-<hash8>``),
  ``config.json``, ``metrics.jsonl``, ``checkpoint.pt``, ``result.json`` and resuming;
- :mod:`common.runs.record_io`: reading a record back, every malformed file one error naming the fix;
- :mod:`common.runs.atomic`: atomic writes; :mod:`common.runs.tables`: the markdown tables runs and the report write;
  :mod:`common.runs.locks`: one process per run (leased locks);
- :mod:`common.runs.typed_config`: a run's config dict read once into its typed dataclass, and written back.

Imports nothing above it: no training, launcher, report or job module.
"""
