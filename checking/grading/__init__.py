"""The floor that writes grades, from the checks the rules floor judged.

    outputs      every file written for the user, written whole (write_whole)
    rubric       points: check id -> points, required or not; the score of a submission
    sheet        the grade sheet (Markdown), the JSON record (and an error's) and the CSV summary
    gradescope   Gradescope's autograder results.json from a record
    child        one submission of a batch: a check_submission.py of its own, on cores of its own
    options      check_submission.py's options, parsed and checked
    slurm_array  a batch as a Slurm array, one task per submission
    batch        many submissions side by side or as a Slurm array; resumable
    submission   one submission: checked, scored, its sheet, record and results written

Imports from rules/ and running/, never from cli.py.
"""
__all__ = []
