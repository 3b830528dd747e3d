"""The checks: what each one runs, and how it is judged.

A check has an id (`ring.volume`), a title, a status (pass, fail, warn: passes with a remark, skip: not
run and why, info: not graded), a one-line summary, the details a student needs to act, and the command
that reproduces it alone. check_all() runs the selected checks on one scratch copy: the files first,
then the allreduce (allreduce.py), then the training runs (training.py), then the MPI usage errors those
jobs showed (usage.py). A check that cannot run because of the submission (its module missing or not
importing, no run finishing) fails, saying why: PASS means every check asked for ran and passed. Only a
check the options leave out (timing without --timing, volume with P = 1 alone) is skipped.
"""
import dataclasses
import os
import re

from checking.rules.allreduce import last_error_line
from checking.running.jobs import FIVE_FILES, REPORT, Job, run_job
from checking.rules.usage import USAGE_CHECKS

__all__ = ["Check", "CHECKS", "INFORMATION", "WARNING_ONLY", "Run", "check_all", "selected"]

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
WARNING_ONLY = ("mpi.unreceived",)  # graded, but what it finds is a warning, never a failure
MODULE = {name[:-3]: name for name in FIVE_FILES}  # module -> file


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
        self.broken = {}  # module -> why it cannot run (missing, or its import error)

    def wants(self, *ids):
        return any(check_id in self.checks for check_id in ids)

    def runs(self, *ids):
        """Whether the jobs of checks `ids` run: one of them is selected, or the MPI usage checks are and no
        allreduce or training check is (they then judge every job)."""
        usage_alone = self.wants(*USAGE_CHECKS) and not any(
            check_id.split(".")[0] in ("naive", "ring", "sync", "async") for check_id in self.checks)
        return self.wants(*ids) or usage_alone

    def job(self, name, task, processes, *arguments, record=True, scratch=None):
        """Run one driver job under the stall and time limits -> its Outcome (kept for the record)."""
        outcome = run_job(scratch or self.scratch, Job(name, task, processes, arguments), self.options.timeout,
                          self.options.limit, record, sandbox=self.options.sandbox)
        self.outcomes.append(outcome)
        return outcome

    def check(self, check_id):
        """The Check to fill in, or a throwaway one when it was not selected."""
        check = self.checks.get(check_id, Check(check_id))
        check.command = check.command or self.reproduce(check_id)
        return check

    def missing(self, *modules):
        """Why these modules cannot run (None if they can)."""
        reasons = [f"{MODULE.get(m, m + '.py')} {self.broken[m]}" for m in modules if m in self.broken]
        return "; ".join(reasons) or None


def check_all(run):
    """Run every selected check on the submission -> the list of Checks, in the sheet's order."""
    from checking.rules import allreduce, timing, training, usage
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


# ----------------------------------------------------------------------------- files

def check_files(run):
    """The five files are there and import; a broken one is named with file:line and skips its checks."""
    present = run.check("files.present")
    missing = [name for name in FIVE_FILES if name not in run.scratch.submitted]
    for name in missing:
        run.broken[name[:-3]] = "is missing"
    present.judge([f"{name} is missing" for name in missing],
                  f"{len(FIVE_FILES) - len(missing)} of 5 present" + (f"; missing: {', '.join(missing)}"
                                                                        if missing else ""))
    compiled = [name[:-3] for name in FIVE_FILES if name not in missing and compiles(run, name)]
    if compiled and not import_modules(run, compiled) and len(compiled) > 1:
        for module in (m for m in compiled if m not in run.broken):  # the job ended badly: each alone decides
            import_modules(run, [module])
    failures = [f"{MODULE[m]} {why}" for m, why in run.broken.items() if why != "is missing"]
    run.check("files.import").judge(failures, "all import" if not failures else f"{len(failures)} do not import")


def import_modules(run, modules):
    """Import each of `modules` on a rank of its own -> whether the job ended well. An import error is filed in
    run.broken with its file:line. A job that ends badly (a rank's import killed it, or hung) leaves every
    other rank's outcome to chance, so only a module imported alone is then judged: it did not import."""
    outcome = run.job("imports", "imports", len(modules), "--modules", ",".join(modules))
    for record in (record for rank in outcome.results for record in rank if "error" in record):
        where = f"{record['at']}: " if record.get("at") else ""
        run.broken[record["module"]] = f"does not import: {where}{record['error']}"
    if outcome.status != "ok" and len(modules) == 1 and modules[0] not in run.broken:
        stops = "; ".join(outcome.stopped or outcome.waits) or last_error_line(outcome.stderr)
        run.broken[modules[0]] = f"did not finish importing ({outcome.status})" + (f": {stops}" if stops else "")
    return outcome.status == "ok"


def compiles(run, name):
    """Compile one file without running it; a syntax error marks its module broken with file:line."""
    path = os.path.join(run.scratch.work, name)
    try:
        with open(path, "rb") as f:
            compile(f.read(), name, "exec")
        return True
    except (SyntaxError, ValueError) as error:  # ValueError: a null byte in the source
        line, message = getattr(error, "lineno", None), getattr(error, "msg", error)
        run.broken[name[:-3]] = f"does not import: {name}:{line}: {type(error).__name__}: {message}"
        return False


# ----------------------------------------------------------------------------- the report

HEADING = re.compile(r"^\s*(?:Q(?:uestion)?\s*)?(\d{1,2})\s*[.):]\s*\S", re.IGNORECASE | re.MULTILINE)
QUESTIONS = range(1, 14)
MOST_PAGES = 5


def check_report(check, scratch):
    """hw3.pdf, if submitted: at most 5 pages (pypdf), and headings numbered 1 to 13 in its text, in order."""
    path = os.path.join(scratch.work, REPORT)
    if REPORT not in scratch.submitted:
        return check.cannot("no hw3.pdf in the submission")
    try:
        import pypdf
        reader = pypdf.PdfReader(path)
        pages = len(reader.pages)
        text = "\n".join(page.extract_text() or "" for page in reader.pages)
    except ImportError:
        return check.skip("pypdf is not installed (make check, or pip install -r requirements-dev.txt)")
    except Exception as error:  # a file that is no PDF is the student's finding, not the checker's crash
        return check.judge([f"hw3.pdf cannot be read as a PDF: {type(error).__name__}: {error}"], "unreadable")
    answered = questions_in_order(text)
    failures = [f"hw3.pdf has {pages} pages, more than the course's {MOST_PAGES}"] if pages > MOST_PAGES else []
    unanswered = [q for q in QUESTIONS if q not in answered]
    if not text.strip():
        failures.append("hw3.pdf has no text layer: its question numbers cannot be read")
    elif unanswered:
        failures.append("no numbered heading found for question(s) " + ", ".join(map(str, unanswered))
                        + " (a line starting '7.', '7)', 'Q7' or 'Question 7', in order)")
    return check.judge(failures, f"{pages} page(s); questions found: {len(answered)} of 13")


def questions_in_order(text):
    """The question numbers 1-13 found as headings, each after the one before it."""
    found, position = [], 0
    for question in QUESTIONS:
        for match in HEADING.finditer(text, position):
            if int(match.group(1)) == question:
                found.append(question)
                position = match.end()
                break
    return found
