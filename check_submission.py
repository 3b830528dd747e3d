"""Check a student's hw3 against the assignment's rules and this reference, and write a grade sheet.

    python3 check_submission.py DIR                       a working folder: the course's skeleton with the five files
    python3 check_submission.py hw3.zip --skeleton DIR    the course's submission form, laid over the skeleton
    python3 check_submission.py subs/*.zip --skeleton DIR --summary grades.csv    many: one CSV row each
        [--quick | --full] [--processes 2,3,4] [--only ring,sync.replicas] [--timing]
        [--json PATH] [--sheet PATH] [--timeout SECONDS] [--keep] [--rubric FILE] [--gradescope PATH]
        [--sandbox MODE | --no-sandbox]
    python3 check_submission.py subs/*.zip --skeleton DIR --sheet sheets/ --summary grades.csv [--jobs N | --slurm]
        many side by side, or as a Slurm array; rerun the same command to finish a batch that was stopped

The submission is never touched: it runs in a scratch copy, every MPI job under a timeout, in a sandbox
(no network, only its scratch folder writable, limits per rank: checking/running/sandbox.py), with a
recording communicator that logs every MPI call. What each check means and why the assignment asks
it: docs/checking.md. Points come from a rubric (checking/grading/rubric.py). Exit status 0 when every
required check passes, 1 when one fails, 2 when a submission cannot be checked at all (a one-line
message says why) or could not run: the launcher, the MPI runtime or the sandbox failed before any rank
started (the sheet quotes the launcher and says it is not the student's doing; a batch checks it again). This file is the shell; the checker is the package `checking/` (docs/checking.md,
"How it works").
"""
import sys

from checking.cli import run
from checking.grading.options import parse

__all__ = ["main"]


def main(argv=None):
    """Parse the options, check what they name -> the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return run(parse(argv), argv)


if __name__ == "__main__":
    sys.exit(main())
