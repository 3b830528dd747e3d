"""The floor that runs a student's code, and judges nothing.

    cases       the allreduce's test cases and the training settings every job uses
    recording   a communicator that logs every MPI call per rank as it happens
    driver      what runs under mpiexec, in a scratch copy of the submission (python -m checking.running.driver)
    stall       the stall clock: a job's time less what other work on its cores held it back
    sandbox     the wall around every job: no network, a filesystem view of its own, limits per rank
    jobs        the scratch copy, and MPI jobs run under timeouts that name where a hung rank waits

Imports nothing from rules/ or grading/: a job's driver, inside the sandbox, loads only this floor.
"""
__all__ = []
