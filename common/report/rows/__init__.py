"""The claims report's rows, one module per experiment (named by its script's slug): each picks its rules' inputs
out of the records; :mod:`common.report.claim_rows` lists them in order."""
