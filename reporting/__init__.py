"""The pieces of report.py, one concern per module.

runs: the experiment matrix and running it (main.py, allreduce_test.py, traces) -> CSV rows.
model: the compute micro-benchmark, the alpha-beta fits and the per-step cost model.
results: the CSVs read back and aggregated per configuration.
plots: the PNG figures.  render: the figures dictionary, rendered into the Jinja2 template REPORT.md.j2.
"""
__all__ = []
