"""The claim rules' error rates, measured by simulation (docs/claim-rules.md): not on any run path.

:mod:`common.power.claim_rates` simulates each rule in its claim's own world at a design and writes
``docs/claim-rules.md``; :mod:`common.power.power_table` regenerates ``common/report/claim_power.csv``, the table the
report reads. No script imports this package: ``make mini`` and ``make claim-tables`` run it as ``python -m``.
"""
