"""check_submission.py's parts: run a student's hw3 through the assignment's rules and this reference.

    recording   a communicator that logs every MPI call per rank as it happens
    cases       the allreduce's test cases and the training settings the checks use
    driver      what runs under mpiexec, in a scratch copy of the submission (python -m checking.driver)
    jobs        the scratch copy, and MPI jobs run under timeouts that name where a hung rank waits
    sandbox     the wall around every job: no network, a filesystem view of its own, limits per rank
    checks      the checks: which jobs they need and how each is judged
    sheet       the grade sheet (Markdown), the JSON record and the CSV summary
"""
