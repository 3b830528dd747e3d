"""The floor that judges the assignment's rules, from the jobs the running floor ran.

    checks      the list of checks, a Check's verdict, and a Run (one submission's checking)
    files       the five files are there and import
    report      hw3.pdf's form: at most 5 pages, questions 1-13
    allreduce   parts 1a and 1b and questions 12-13: naive and ring against MPI's Allreduce
    training    parts 1 and 2: the synchronous and asynchronous networks on MNIST
    usage       MPI usage errors, as MUST reports them: requests never completed, send buffers changed in
                flight, messages never received
    timing      --timing: the submission's run times beside this reference's
    assignment  every selected check, in the sheet's order (check_all)

Imports only from running/; knows nothing of points, sheets or batches.
"""
__all__ = []
