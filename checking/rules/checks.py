"""The list of checks, a Check's verdict, and a Run: one submission's checking, which the rules fill in.

A check has an id (`ring.volume`), a title, a status (pass, fail, warn: passes with a remark, skip: not
run and why, info: not graded), a one-line summary, the details a student needs to act, and the command
that reproduces it alone. A check that cannot run because of the submission (its module missing or not
importing, no run finishing) fails, saying why: PASS means every check asked for ran and passed. Only a
check the options leave out (timing without --timing, volume with P = 1 alone) is skipped. A job that no
rank started (the launcher, the MPI runtime or the sandbox failed before the submission's code could run)
is no check's failure: LaunchError stops the whole checking, and the submission is not graded.
"""
import dataclasses

from checking.rules.usage import USAGE_CHECKS
from checking.running.jobs import FIVE_FILES, Job, run_job

__all__ = ["Check", "CHECKS", "LaunchError", "INFORMATION", "RESULTS_ONLY", "WARNING_ONLY", "MODULE", "Run", "selected"]

CHECKS = {  # id -> title, in the sheet's order
    "files.present": "The five files are in the submission",
    "files.import": "Each of them imports in the course's skeleton",
    "report": "hw3.pdf: at most 5 pages, answering questions 1-13",
    "naive.agrees": "Naive allreduce: MPI's answer on every rank",
    "naive.rules": "Naive allreduce: point-to-point calls only, non-blocking",
    "naive.buffers": "Naive allreduce: send left unchanged, recv filled",
    "naive.volume": "Naive allreduce: (P - 1)n elements sent per process (question 12)",
    "ring.agrees": "Ring allreduce: MPI's answer on every rank",
    "ring.rules": "Ring allreduce: point-to-point calls only, non-blocking",
    "ring.buffers": "Ring allreduce: send left unchanged, recv filled",
    "ring.volume": "Ring allreduce: 2(P - 1)n/P elements sent per process (question 13)",
    "sync.completes": "Synchronous runs complete",
    "sync.replicas": "Synchronous: every rank ends with the same model, bit for bit",
    "sync.accuracy": "Synchronous: test accuracy within 1.5 points of the serial network's",
    "sync.split": "Synchronous: the ranks share each mini-batch (rows per step add up to mini_batch_size)",
    "sync.exchange": "Synchronous: MPI's collective in the collective module; ringallreduce and no collective "
                     "in the ring module",
    "async.completes": "Asynchronous runs complete",
    "async.batches": "Asynchronous: the workers do number_of_batches mini-batches per epoch together",
    "async.rules": "Asynchronous: only non-blocking point-to-point calls and waits during training",
    "async.model": "Asynchronous: rank 0 ends with the trained model (within 3 points of serial)",
    "async.ranks": "Asynchronous: every rank's test accuracy",
    "mpi.requests": "MPI usage: every non-blocking request completed (Wait or Test) before the function returns",
    "mpi.in_flight": "MPI usage: no send buffer changed while its message is in flight",
    "mpi.unreceived": "MPI usage: no message left unreceived (a warning, never a failure)",
    "timing": "Run times beside this reference's, same machine",
}
INFORMATION = ("async.ranks", "timing")  # listed, never graded
# Judged from what the runs return (accuracies), or running no recorded job: asked for alone, the training
# runs need no recording communicator, which on 2 cores doubled a 4-rank ring run (docs/checking.md).
RESULTS_ONLY = ("files.present", "report", "sync.accuracy", "async.model", "async.ranks", "timing")
WARNING_ONLY = ("mpi.unreceived",)  # graded, but what it finds is a warning, never a failure
MODULE = {name[:-3]: name for name in FIVE_FILES}  # module -> file


class LaunchError(Exception):
    """A job that no rank started (one line: the job and why, in the launcher's words); `outcome`: that job's."""

    def __init__(self, outcome):
        job = outcome.job
        super().__init__(f"job {job.name} ({job.processes} process{'es' if job.processes != 1 else ''}): "
                         f"{outcome.launch_error}")
        self.outcome = outcome


@dataclasses.dataclass
class Check:
    id: str
    status: str = "skip"
    summary: str = ""
    details: list = dataclasses.field(default_factory=list)
    command: str = ""

    @property
    def title(self):
        return CHECKS[self.id]

    @property
    def required(self):
        return self.id not in INFORMATION

    def judge(self, failures, summary, warnings=(), details=()):
        """Set the status from the failures (fail), else the warnings (warn), else pass."""
        self.status = "fail" if failures else "warn" if warnings else "pass"
        self.summary = summary
        self.details = list(failures) + list(warnings) + list(details)
        return self

    def skip(self, reason):
        """Not run because the options leave it out (not because of the submission)."""
        self.status, self.summary = "skip", reason
        return self

    def cannot(self, reason):
        """Not run because of the submission (a module missing or broken, no run finished): a failure."""
        self.status, self.summary = "fail", f"not run: {reason}"
        self.details = [f"this check could not run, so it fails: {reason}"]
        return self


def selected(check_id, only):
    """Whether `check_id` is among `only` (ids or groups such as "ring", "sync"); None: all."""
    return only is None or any(check_id == item or check_id.startswith(item + ".") for item in only)


class Run:
    """One submission's checking: its scratch copy, the options, every job's outcome, the checks."""

    def __init__(self, scratch, options, reproduce):
        self.scratch, self.options, self.reproduce = scratch, options, reproduce
        self.checks = {check_id: Check(check_id) for check_id in CHECKS if selected(check_id, options.only)}
        self.outcomes = []
        self.relaunched = []  # the first tries of jobs launched again (job): for the record, never judged
        self.broken = {}  # module -> why it cannot run (missing, or its import error)

    def wants(self, *ids):
        return any(check_id in self.checks for check_id in ids)

    def runs(self, *ids):
        """Whether the jobs of checks `ids` run: one of them is selected, or the MPI usage checks are and no
        allreduce or training check is (they then judge every job)."""
        usage_alone = self.wants(*USAGE_CHECKS) and not any(
            check_id.split(".")[0] in ("naive", "ring", "sync", "async") for check_id in self.checks)
        return self.wants(*ids) or usage_alone

    @property
    def records(self):
        """Whether the jobs record their calls: unless every check asked for is judged without them."""
        return not set(self.checks) <= set(RESULTS_ONLY)

    def job(self, name, task, processes, *arguments, record=True, scratch=None):
        """Run one driver job under the stall and time limits -> its Outcome (kept for the record). LaunchError
        when no rank started it: every other job would fail alike, and none of it is the submission's doing.

        Unless an earlier job's code could have caused it: after a job that ran the submission, the job is tried
        once more in a scratch folder laid out afresh (Scratch.reset), and only a launch failure there is the
        launcher's."""
        scratch, job = scratch or self.scratch, Job(name, task, processes, arguments)
        outcome = self.run_once(scratch, job, record)
        if outcome.launch_error and scratch.launched:
            self.relaunched.append(outcome)
            scratch.reset()
            outcome = self.run_once(scratch, job, record)
        self.outcomes.append(outcome)
        if outcome.launch_error:
            raise LaunchError(outcome)
        return outcome

    def run_once(self, scratch, job, record):
        return run_job(scratch, job, self.options.timeout, self.options.limit, record and self.records,
                       sandbox=self.options.sandbox)

    def check(self, check_id):
        """The Check to fill in, or a throwaway one when it was not selected."""
        check = self.checks.get(check_id, Check(check_id))
        check.command = check.command or self.reproduce(check_id)
        return check

    def missing(self, *modules):
        """Why these modules cannot run (None if they can)."""
        reasons = [f"{MODULE.get(m, m + '.py')} {self.broken[m]}" for m in modules if m in self.broken]
        return "; ".join(reasons) or None
