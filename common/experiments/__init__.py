"""One job module per numbered script: ``NN_<name>.py`` -> ``common/experiments/<name>.py`` (docs/design.md).

A job module holds its experiment's presets and run configs, the job function the launcher runs
(inline or pickled by submitit) and the summary tables its script prints. It may use the
science modules, models, data, training and run records, and the job modules it builds on (the
growth chain trains with the sweep's job); it never imports the launcher or ``submitit``.
"""
