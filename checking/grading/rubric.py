"""Points: the rubric (check id -> points, required or not) and the score it gives a submission.

A rubric file is TOML (docs/rubric.toml is the default, to copy and edit):

    [checks."naive.agrees"]
    points = 8
    part = "1a"          # a label, for the reader and Gradescope's tags
    required = true      # the default; see below

The score, check by check, of the checks asked for:
- pass and warn earn the points (a warning passes, with a remark); fail earns 0;
- skip: a required check that was asked for but could not run (a file missing, a module that does
  not import, no hw3.pdf) earns 0 of its points; a check marked `required = false` that is skipped
  leaves the maximum instead (e.g. `report` where the course collects the report elsewhere);
- information (async.ranks, timing) is never scored, and a rubric may not give it points;
- a check not asked for (`--only`) is neither scored nor counted in the maximum.
An id in a rubric file that is no check is an error at start (a typo would score nothing, silently);
a check the rubric does not name is worth 0, and the checker says so at start.
"""
import dataclasses

from checking.rules.checks import CHECKS, INFORMATION, selected

__all__ = ["Rubric", "RubricError", "Score", "DEFAULT"]

DEFAULT = {  # id -> (points, part): 100 points along the assignment's parts
    "files.present": (2, "files"), "files.import": (3, "files"),
    "naive.agrees": (8, "1a"), "naive.rules": (3, "1a"), "naive.buffers": (2, "1a"), "naive.volume": (2, "1a"),
    "ring.agrees": (10, "1b"), "ring.rules": (4, "1b"), "ring.buffers": (2, "1b"), "ring.volume": (4, "1b"),
    "sync.completes": (5, "part 1"), "sync.replicas": (6, "part 1"), "sync.accuracy": (5, "part 1"),
    "sync.split": (4, "part 1"), "sync.exchange": (5, "part 1"),
    "async.completes": (5, "part 2"), "async.batches": (5, "part 2"), "async.rules": (7, "part 2"),
    "async.model": (8, "part 2"),
    "report": (5, "report"),
    # MPI usage errors (issue 33's checks; they score once the checker has them)
    "mpi.requests": (2, "MPI usage"), "mpi.in_flight": (2, "MPI usage"), "mpi.unreceived": (1, "MPI usage"),
}


class RubricError(Exception):
    """A rubric file that cannot be used: one line saying why."""


@dataclasses.dataclass(frozen=True)
class Item:
    points: float
    required: bool = True
    part: str = ""


@dataclasses.dataclass
class Score:
    """A submission's points: the total, the maximum, and (id, earned, possible) per check."""
    points: float
    maximum: float
    checks: list

    def text(self):
        return f"{self.points:g}/{self.maximum:g} points"


class Rubric:
    """Check id -> Item; `source` says where it came from ("default" or the file's path)."""

    def __init__(self, items, source):
        self.items, self.source = items, source

    @classmethod
    def default(cls):
        """The default rubric (docs/rubric.toml says the same)."""
        return cls({i: Item(points, True, part) for i, (points, part) in DEFAULT.items()}, "default")

    @classmethod
    def read(cls, path):
        """Read and validate a TOML rubric file (tomllib from Python 3.11, else the tomli package)."""
        try:
            import tomllib
        except ImportError:
            try:
                import tomli as tomllib
            except ImportError:
                raise RubricError("reading a rubric file needs Python 3.11 or the tomli package "
                                  "(pip install tomli)") from None
        try:
            with open(path, "rb") as f:
                table = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as error:
            raise RubricError(f"{path}: {error}") from None
        return cls(parse(table, path), path)

    def unrated(self):
        """The graded checks this rubric does not name (worth 0)."""
        return [i for i in CHECKS if i not in self.items and i not in INFORMATION]

    def maximum(self, only):
        """The most points a submission can earn with the checks `only` asks for (None: all)."""
        return sum(item.points for i, item in self.items.items() if selected(i, only))

    def score(self, statuses):
        """Score (check id, status) pairs, the checks that were asked for."""
        earned = []
        for check_id, status in statuses:
            item = self.items.get(check_id)
            if item is None or check_id in INFORMATION or status == "info":
                earned.append((check_id, 0, 0))
            elif status in ("pass", "warn"):
                earned.append((check_id, item.points, item.points))
            else:  # fail, or a skip: 0 of its points, or none at all for a check that need not run
                earned.append((check_id, 0, item.points if status == "fail" or item.required else 0))
        return Score(sum(e[1] for e in earned), sum(e[2] for e in earned), earned)


def parse(table, path):
    """A rubric file's table -> {id: Item}; RubricError on anything else."""
    if set(table) != {"checks"} or not isinstance(table["checks"], dict):
        raise RubricError(f"{path}: expected one table [checks] (or [checks.\"ID\"] tables), found "
                          f"{', '.join(sorted(table)) or 'nothing'}")
    unknown = [i for i in table["checks"] if i not in CHECKS]
    if unknown:
        raise RubricError(f"{path}: unknown check id(s) {', '.join(unknown)}; the checks: {', '.join(CHECKS)}")
    items = {}
    for check_id, entry in table["checks"].items():
        entry = {"points": entry} if isinstance(entry, (int, float)) and not isinstance(entry, bool) else entry
        if not isinstance(entry, dict) or set(entry) - {"points", "required", "part"} or "points" not in entry:
            raise RubricError(f"{path}: {check_id}: expected points = N and optionally required = true/false, "
                              f"part = \"...\"; got {entry!r}")
        points, required = entry["points"], entry.get("required", True)
        if isinstance(points, bool) or not isinstance(points, (int, float)) or points < 0:
            raise RubricError(f"{path}: {check_id}: points must be a number of at least 0, got {points!r}")
        if not isinstance(required, bool):
            raise RubricError(f"{path}: {check_id}: required must be true or false, got {required!r}")
        if check_id in INFORMATION and points:
            raise RubricError(f"{path}: {check_id} is information, never graded: it cannot carry points")
        items[check_id] = Item(points, required, str(entry.get("part", "")))
    return items
