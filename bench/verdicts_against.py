"""Every fixture through this checker and another commit's, with the same options: do the verdicts agree?

    python3 bench/verdicts_against.py 6d57168            # the mutants and the hostile fixtures
    python3 bench/verdicts_against.py 6d57168 --whole    # and the two correct fixtures, whole, full length

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


def check(checker_dir, submissions, options, record):
    """Run checker_dir's check_submission.py -> its JSON records, as a list."""
    command = [sys.executable, "check_submission.py", *submissions, *options, "--json", record]
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the other commit")
    parser.add_argument("--whole", action="store_true", help="also the correct fixtures, whole, at full length")
    options = parser.parse_args(argv)
    agree = True
    with tempfile.TemporaryDirectory(prefix="hw3-verdicts-") as folder:
        tree = os.path.join(folder, "base")
        subprocess.run(["git", "worktree", "add", "--quiet", "--detach", tree, options.base], cwd=PROJECT_DIR,
                       check=True)
        try:
            print(f"verdicts of this checker and of {options.base}'s, same fixtures and options\n")
            print(f"| fixture | this checker | {options.base} | statuses |\n| --- | --- | --- | --- |")
            for name in MUTANTS:
                path = build_mutant(name, os.path.join(folder, "mutants"))
                records = [check(d, [path], mutant_arguments(name), os.path.join(folder, f"{name}-{i}.json"))[0]
                           for i, d in enumerate((PROJECT_DIR, tree))]
                agree &= compare(name, *records)
            host = os.path.join(folder, "host")
            os.makedirs(os.path.join(host, "sibling"))
            os.makedirs(os.path.join(host, "outside"))
            with open(os.path.join(host, "sibling", "secret.txt"), "w") as f:
                f.write("canary")
            hostile = [build_hostile(name, host, os.path.join(host, "outside", "pwned.txt"),
                                     os.path.join(host, "sibling", "secret.txt"), 9) for name in HOSTILE]
            batches = [check(d, hostile + [CORRECT], BATCH, os.path.join(folder, f"hostile-{i}.json"))
                       for i, d in enumerate((PROJECT_DIR, tree))]
            for ours, theirs in zip(*batches):
                agree &= compare(f"{ours['submission']} (hostile batch)", ours, theirs)
            for path in (CORRECT, CORRECT_B) if options.whole else ():
                records = [check(d, [path], [], os.path.join(folder, f"whole-{i}.json"))[0]
                           for i, d in enumerate((PROJECT_DIR, tree))]
                agree &= compare(f"{os.path.basename(path)} (whole)", *records)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=PROJECT_DIR)
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
