"""The pieces of report.py, one concern per module.

quiet: whether the machine is quiet before a run.  runs: the experiment matrix and running it -> CSV rows.
model: the micro-benchmarks, the alpha-beta-gamma fits and the cost model.
results: the CSVs read back per configuration.  plots: the figures.
render: the figures dictionary, rendered into REPORT.md.j2 and hw3.typ.j2.
"""
__all__ = []
