"""files.present and files.import: the five files are there, and each imports in the course's skeleton.

A file that does not compile is named with file:line and never run; the others are imported by one job,
a rank each; a job that ends badly leaves every other rank's outcome to chance, so each module is then
imported alone. A broken module is filed in run.broken, and the checks that need it fail, saying why.
"""
import os

from checking.rules.checks import MODULE
from checking.running.jobs import FIVE_FILES, last_error_line

__all__ = ["check_files"]


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
