"""check_submission.py's parts: run a student's hw3 through the assignment's rules and this reference.

    recording   a communicator that logs every MPI call per rank as it happens
    cases       the allreduce's test cases and the training settings the checks use
    driver      what runs under mpiexec, in a scratch copy of the submission (python -m checking.running.driver)
    jobs        the scratch copy, and MPI jobs run under timeouts that name where a hung rank waits
    sandbox     the wall around every job: no network, a filesystem view of its own, limits per rank
    checks      the checks: which jobs they need and how each is judged
    allreduce   the rules of parts 1a and 1b and questions 12-13: naive and ring against MPI's Allreduce
    training    the rules of parts 1 and 2: the synchronous and asynchronous networks on MNIST
    usage       MPI usage errors, as MUST reports them: requests never completed, send buffers changed in
                flight, messages never received
    timing      --timing: the submission's run times beside this reference's
    sheet       the grade sheet (Markdown), the JSON record and the CSV summary
    stall       the stall clock: a job's time less what other work on its cores held it back
    rubric      points: check id -> points, required or not; the score of a submission
    gradescope  Gradescope's autograder results.json from a record
    batch       many submissions, each a check_submission.py of its own on its own cores; resumable
    slurm_array a batch as a Slurm array, one task per submission
"""
