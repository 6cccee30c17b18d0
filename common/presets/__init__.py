"""The presets as data: what differs between ``--preset smoke``, ``mini`` and ``paper`` for each experiment.

One module per experiment's tables, below the job modules, importing nothing above them, so that the job modules,
the report and the rules' simulation (which reads the designs) all read the same values. A difference between
presets is a field of a preset here, never an ``if`` on a preset's name elsewhere (docs/design.md, section
"Presets").
"""
