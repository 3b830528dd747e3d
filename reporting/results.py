"""The CSVs of one report read back: each configuration's runs by seed, represented by its median run, and the
cost model fitted to them."""
__all__ = ["Results", "read_csv", "record_stem", "COLLAPSED_FROM"]

import ast
import csv
import json
import os
import statistics

from reporting.model import CostModel, link_exchange

# A run collapsed (diverged) when its most frequent answer went to at least this share of the test images: the network
# then answers one digit for (nearly) every image. main.py --json records the share (top_class_share).
COLLAPSED_FROM = 0.9


def read_csv(path):
    """CSV rows as dictionaries: numbers, lists and booleans converted, empty cells None; [] if there is no file."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return [{key: convert(value) for key, value in row.items()} for row in csv.DictReader(f)]


def convert(text):
    """'16' -> 16, '0.5' -> 0.5, 'True' -> True, '[1, 2]' -> [1, 2], '' -> None; any other text stays text."""
    try:
        return ast.literal_eval(text) if text else None
    except (ValueError, SyntaxError):
        return text


def record_stem(label, processes, repeat):
    """A run's file name in records/, without extension: its --json record (.json) and console output (.txt)."""
    return f"{label.replace(' ', '_')}_P{processes}_r{repeat}"


def group(rows, keys):
    """{values of `keys`: the rows with those values}, in first-seen order."""
    groups = {}
    for row in rows:
        groups.setdefault(tuple(row.get(k) for k in keys), []).append(row)
    return groups


def collapsed(share):
    """Whether a run with this top-class share collapsed; None where the share was not recorded."""
    return None if share is None else share >= COLLAPSED_FROM


class Results:
    """runs.csv, allreduce.csv, compute.csv and run_info.json of one output folder."""

    def __init__(self, out):
        self.out = out
        self.runs = read_csv(os.path.join(out, "runs.csv"))
        self.allreduce_runs = allreduce_test_runs(self.runs)
        self.allreduce_all = read_csv(os.path.join(out, "allreduce.csv"))  # every run's rows
        self.allreduce = representative_rows(self.allreduce_all, self.allreduce_runs)
        self.compute_rows = median_rows(read_csv(os.path.join(out, "compute.csv")), ("kind", "rows"))
        with open(os.path.join(out, "run_info.json")) as f:
            self.info = json.load(f)
        self.machine, self.settings, self.cores = self.info["machine"], self.info["settings"], self.info["machine"]["cores"]
        self.configs = aggregate(self.runs)
        reduce = [r for r in self.compute_rows if r["kind"] == "reduce"]
        self.gamma = reduce[-1]["seconds"] / reduce[-1]["rows"] if reduce else None
        one_way = [r for r in (self.info.get("breakdown") or {}).get("rows") or [] if r["part"] == "one way"]
        self.fits = link_exchange(one_way, self.gamma)  # one link's constants, for every algorithm
        self.model = CostModel(self.compute_rows, self.fits, self.settings, self.cores)
        self.compare_with_serial()

    def get(self, label, processes):
        """The configuration's entry if at least one of its runs succeeded, else None."""
        entry = self.configs.get((label, processes))
        return entry if entry and entry["ok_runs"] else None

    def labels(self, mode):
        """Series labels of a mode, in the order they ran."""
        return list(dict.fromkeys(label for (label, _), e in self.configs.items() if e["mode"] == mode))

    def series(self, label):
        """Successful entries of a series, by number of processes."""
        return sorted((e for (l, _), e in self.configs.items() if l == label and e["ok_runs"]),
                      key=lambda e: e["processes"])

    def entries(self, mode):
        """Successful entries of every series of a mode, series by series."""
        return [e for label in self.labels(mode) for e in self.series(label)]

    def console(self, label, processes, run=None):
        """What the configuration's median run (or `run`, one of its seed_runs) printed, its command line first; None
        if not kept."""
        entry = run or (self.allreduce_runs.get(processes) if label == "allreduce_test"
                        else self.configs.get((label, processes))) or {}
        path = os.path.join(self.out, "records", record_stem(label, processes, entry.get("repeat") or 0) + ".txt")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return f.read().rstrip()

    @property
    def serial(self):
        return self.get("serial", 1)

    def compare_with_serial(self):
        """Each entry's speed-up: serial's samples per second over the run's, which is serial's time over the run's
        wherever the run trains serial's samples per epoch (strong scaling, async)."""
        serial = self.serial
        rate = lambda e: (e["samples_per_epoch"] or 1) * e["epochs"] / e["time"]  # noqa: E731
        for entry in self.configs.values():
            known = serial is not None and entry["ok_runs"] and entry.get("time")
            entry["speedup"] = rate(entry) / rate(serial) if known else None


def median_run(rows):
    """The successful run of median training time among `rows` (the lower middle one of an even count), or None."""
    ok = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: r["time"])
    return ok[(len(ok) - 1) // 2] if ok else None


def mean(values):
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def aggregate(runs):
    """(label, processes) -> the configuration's median run, its row as it is: the figures the report quotes of one
    run (time, accuracy, staleness, console output) are that run's. Beside it, its successful runs by seed and their
    means, and whether each run collapsed (None where not recorded)."""
    configs = {}
    trainings = [r for r in runs if r["mode"] != "allreduce_test"]
    for key, rows in group(trainings, ("label", "processes")).items():
        entry = dict(median_run(rows) or rows[0])
        ok = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: r.get("seed") or 0)
        shares = [r.get("top_class_share") for r in ok]
        epochs = entry.get("epoch_accuracy")  # '84.9;90.1' or a number
        entry.update(runs=len(rows), ok_runs=len(ok), seed_runs=ok, run_accuracies=[r["test_accuracy"] for r in ok],
                     run_shares=shares, mean_time=mean(r["time"] for r in ok),
                     time_range=(min(r["time"] for r in ok), max(r["time"] for r in ok)) if ok else None,
                     mean_accuracy=mean(r["test_accuracy"] for r in ok),
                     collapsed=collapsed(entry.get("top_class_share")),
                     collapsed_runs=None if None in shares else sum(map(collapsed, shares)),
                     epoch_accuracy=[] if epochs is None else [float(a) for a in str(epochs).split(";") if a])
        configs[key] = entry
    return configs


def allreduce_test_runs(runs):
    """processes -> runs.csv's median run of allreduce_test.py there (by its wall time), or None if none succeeded."""
    tests = group([r for r in runs if r["mode"] == "allreduce_test"], ("processes",))
    return {p: median_run(same) for (p,), same in tests.items()}


def representative_rows(rows, chosen):
    """allreduce.csv's rows of the `chosen` run of allreduce_test.py at each process count, so that the tables
    quote the run whose console output the report shows; where there is none, the median over its repeats."""
    kept = [r for r in rows if chosen.get(r["processes"]) is None
            or (r.get("repeat") or 0) == (chosen[r["processes"]].get("repeat") or 0)]
    return median_rows(kept, ("processes", "size"))


def median_rows(rows, keys):
    """One row per value of `keys`, its times (columns ending in _s, or seconds) the median over repeats."""
    merged = []
    for same in group(rows, keys).values():
        row = dict(same[0])
        for key in (k for k in row if k.endswith("_s") or k == "seconds"):
            values = [r[key] for r in same if isinstance(r.get(key), (int, float))]
            row[key] = statistics.median(values) if values else None
        merged.append(row)
    return merged
