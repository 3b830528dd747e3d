"""The top floor: what check_submission.py does with its options, from them to its exit status."""
import sys

from checking.grading.batch import run_batch
from checking.grading.submission import check_submission

__all__ = ["run"]


def run(options, argv):
    """Check one submission, or a batch of them (`argv`: the command line, for each child's own) -> exit status."""
    unrated = options.rubric.unrated()
    if unrated and options.rubric.source != "default":
        print(f"check_submission.py: {options.rubric.source} gives no points for {', '.join(unrated)}: "
              "they are worth 0", file=sys.stderr)
    return run_batch(options, argv) if options.batch else check_submission(options)
