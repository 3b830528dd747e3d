"""check_submission.py's checker: run a student's hw3 through the assignment's rules and this reference.

Four floors, each importing only from the floors below it (tests/test_imports.py holds it to that):

  cli.py      the top: what check_submission.py does with its options (one submission, or a batch)
  grading/    writes grades: the options, one submission's checking and outputs, the sheet, JSON and CSV
              records, rubric points, Gradescope's results.json, batches and the Slurm array
  rules/      judges the assignment's rules: the list of checks, then one module per part of the
              assignment (files, the report's form, the allreduces, the training modes, MPI usage
              errors, timing), and the whole assignment in the sheet's order
  running/    runs a student's code and judges nothing: the scratch copy and its jobs, the driver and the
              recording communicator inside them, the sandbox around them, the stall clock, the cases

What each floor holds and may touch: docs/checking.md, "How it works".
"""
__all__ = []
