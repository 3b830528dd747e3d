"""The whole assignment: every selected check on one submission, in the sheet's order.

The files first (files.py), then the report's form (report.py), the allreduce (allreduce.py), the
training runs (training.py), then the MPI usage errors those jobs showed (usage.py), and --timing last.
"""
from checking.rules import allreduce, timing, training, usage
from checking.rules.files import check_files
from checking.rules.report import check_report

__all__ = ["check_all"]


def check_all(run):
    """Run every selected check on the submission -> the list of Checks, in the sheet's order."""
    check_files(run)
    if run.wants("report"):
        check_report(run.check("report"), run.scratch)
    allreduce.check_allreduce(run)
    training.check_training(run)
    usage.check_usage(run)
    if run.wants("timing") and run.options.timing:
        timing.check_timing(run)
    elif "timing" in run.checks:
        run.checks["timing"].skip("not asked for (--timing)")
    return list(run.checks.values())
