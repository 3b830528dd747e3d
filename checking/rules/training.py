"""The training checks: the submission's serial, synchronous and asynchronous networks on MNIST.

Every run is the course's experiment with a fixed seed (cases.SETTINGS). The serial network, trained
once per seed of SERIAL_SEEDS (one job, a rank per seed), gives the accuracy to match. Each sync module
runs on 2 and 4 processes (8 too with --full), the async module with 1 master on 2 processes, 2 on 4
and 2 on 3. From the recorded calls and the driver's markers (a back_prop marker per training step):

    sync.completes, async.completes   the run ends with every rank's accuracy, and no rank had a send and
                    a receive in flight at once through one buffer (MPICH may abort on it, Open MPI not)
    sync.split      per step, the rows of the ranks' forward_prop add up to mini_batch_size
    sync.exchange   collective module: an MPI collective between every two steps; ring module: the
                    student's ringallreduce between every two steps, and inside the training window
                    (first to last back_prop) no collective more often than twice per epoch
    async.batches   back_prop calls over all ranks = number_of_batches x epochs
    async.rules     inside the training window no blocking point-to-point call on any rank (any
                    thread), and no collective more often than twice per epoch: epoch ends may
                    validate or agree, the per-mini-batch protocol may not
"""
import hashlib
import json
import os
import statistics
import sys

import numpy as np

from checking.running.cases import SERIAL_SEEDS, SETTINGS, UNTRAINED_BELOW
from checking.running.jobs import FIVE_FILES, REPORT, exclusive
from checking.running.recording import shared_buffer_text
from checking.rules.checks import CHECKS

__all__ = ["check_training", "steps", "training_window"]

SYNC_MODULES = {"sync_network_collective": "collective module", "sync_network": "ring module"}
SYNC_PROCESSES, FULL_SYNC_PROCESSES = (2, 4), (2, 4, 8)
ASYNC_RUNS = ((1, 2), (2, 4), (2, 3))  # (masters, processes)
SYNC_BELOW_SERIAL, ASYNC_BELOW_SERIAL = 1.5, 3.0  # points of test accuracy
COLLECTIVES_PER_EPOCH = 2
HERE = os.path.dirname(os.path.abspath(__file__))


def settings_arguments(run):
    return ("--epochs", run.options.epochs, "--batches", run.options.batches)


def check_training(run):
    """Run the serial baseline, then the sync and async checks that were asked for."""
    serial = serial_baseline(run) if run.wants("sync.accuracy", "async.model") else (None, "not asked for")
    if run.runs(*(i for i in CHECKS if i.startswith("sync."))):
        check_sync(run, serial)
    if run.runs(*(i for i in CHECKS if i.startswith("async."))):
        check_async(run, serial)


def serial_baseline(run):
    """-> (mean test accuracy of the submission's serial network over SERIAL_SEEDS, the accuracies), or
    (None, why) when it cannot run. With --cache, a baseline made before from the same files is read back
    (baseline_key): the serial network depends on the skeleton, not on the five files."""
    reason = run.missing("network")
    if reason:
        return None, reason
    if run.options.cache is None:
        return train_serial(run)
    path = os.path.join(run.options.cache, f"serial-{baseline_key(run)}.json")
    with exclusive(path + ".lock"):  # a batch's other submissions wait for it rather than train it again
        if os.path.exists(path):
            with open(path) as f:
                accuracies = json.load(f)["accuracies"]
            return statistics.mean(accuracies), accuracies
        serial = train_serial(run)
        if serial[0] is not None:
            with open(path + ".part", "w") as f:
                json.dump({"accuracies": serial[1]}, f)
            os.replace(path + ".part", path)
    return serial


def train_serial(run):
    seeds = ",".join(map(str, SERIAL_SEEDS))
    outcome = run.job("serial", "serial", len(SERIAL_SEEDS), "--seeds", seeds, *settings_arguments(run))
    accuracies = [r["accuracy"] for rank in outcome.results for r in rank if "accuracy" in r]
    if outcome.status != "ok" or len(accuracies) != len(SERIAL_SEEDS):
        errors = [f"{r['error']} at {r.get('at')}" for rank in outcome.results for r in rank if "error" in r]
        return None, "the serial NeuralNetwork did not train: " + ("; ".join(errors[:1]) or outcome.status)
    return statistics.mean(accuracies), accuracies


def baseline_key(run):
    """A digest of all a serial baseline depends on: the files it runs (all in the scratch folder but the
    five and hw3.pdf), the settings and seeds, the data, this driver and the interpreter and numpy."""
    hasher = hashlib.blake2b(digest_size=16)
    hasher.update(repr((SERIAL_SEEDS, run.options.epochs, run.options.batches, SETTINGS, run.scratch.data,
                        sys.version, np.__version__)).encode())
    work = run.scratch.work
    files = sorted(os.path.relpath(os.path.join(root, name), work) for root, _, names in os.walk(work)
                   for name in names)
    for label, path in [(name, os.path.join(HERE, "..", "running", name)) for name in ("driver.py", "cases.py")] + \
            [(name, os.path.join(work, name)) for name in files if name not in FIVE_FILES + (REPORT,)]:
        with open(path, "rb") as f:
            hasher.update(label.encode() + b"\0" + f.read())
    return hasher.hexdigest()


# ----------------------------------------------------------------------------- what the logs show

def steps(calls):
    """A rank's training steps: the back_prop markers, in order."""
    return [record for record in calls if record.get("what") == "back_prop"]


def training_window(calls_by_rank):
    """(first, last) back_prop time over all ranks, or None when no rank trained."""
    times = [record["t"] for calls in calls_by_rank for record in steps(calls)]
    return (min(times), max(times)) if times else None


def rank_window(calls, window):
    """The part of the training window in which this rank trains: from its first to its last back_prop;
    for a rank that takes no step (a master), its first to last point-to-point call within the window.

    Ranks leave a collective at different times: a worker may take its first step while another still
    receives the broadcast of the initial parameters, or end while a master enters the final gather, and
    a window common to all ranks would count that collective as one made while training.
    """
    own = [record["t"] for record in steps(calls)]
    if own:
        return min(own), max(own)
    serving = [c["t"] for c in inside(calls, window, ("p2p", "p2p-blocking", "wait", "test"))]
    return (min(serving), max(serving)) if serving else window


def inside(calls, window, kinds):
    """The calls of `kinds` made within the window."""
    return [c for c in calls if c.get("k") in kinds and window[0] <= c["t"] <= window[1]]


def failed_run(outcome, label):
    """The lines that say how a run failed (error with file:line, or where each rank waits)."""
    errors = {f"{r['error']} at {r.get('at')}" for rank in outcome.results for r in rank if "error" in r}
    if errors:
        return [f"{label}: raised {error}" for error in sorted(errors)]
    verb = {"hung": "hangs", "timeout": "ran out of time", "error": "crashed"}.get(outcome.status, outcome.status)
    tail = [line for line in outcome.stderr.splitlines() if line.strip()][-3:] if outcome.status == "error" else []
    return [f"{label}: {verb}" + "".join(f"\n    {line}" for line in outcome.waits + tail)]


def shared_buffers(outcome, label):
    """The lines for sends and receives a run posted through one buffer at once: erroneous in MPI, so the run
    fails whether its MPI aborted on them (MPICH) or completed them (Open MPI), in the same words."""
    found = {(rank, shared_buffer_text(call)) for rank, calls in enumerate(outcome.calls)
             for call in calls if "overlaps" in call}
    return [f"{label}: rank {rank} {text}" for rank, text in sorted(found)]


def accuracies(outcome):
    """Every rank's test accuracy after fit (None where a rank recorded none)."""
    found = {}
    for rank, records in enumerate(outcome.results):
        for record in records:
            if "accuracy" in record:
                found[rank] = record
    return [found.get(rank) for rank in range(len(outcome.results))]


# ----------------------------------------------------------------------------- synchronous

class Findings:
    """What the runs showed for one check: failures, warnings, details, and the facts of its summary."""

    def __init__(self):
        self.failures, self.warnings, self.details, self.facts, self.judged = [], [], [], [], 0
        self.accuracies = []  # rank 0's, for the accuracy checks' summary

    def fill(self, check, skipped, by_options=False):
        """Judge `check`; with nothing judged it fails, saying why (the runs it needs did not finish), or is
        skipped when the options asked for no run."""
        if not self.judged and not self.failures:
            return check.skip(skipped) if by_options else check.cannot(skipped)
        if self.accuracies:
            low, high = min(self.accuracies), max(self.accuracies)
            self.facts.insert(0, f"rank 0 {low:.2f} %" + (f" to {high:.2f} %" if high != low else ""))
        summary = "; ".join(dict.fromkeys(self.facts))
        return check.judge(self.failures, summary, self.warnings, self.details)


def short(module):
    return {"sync_network_collective": "collective", "sync_network": "ring"}[module]


# ----------------------------------------------------------------------------- synchronous

def check_sync(run, serial):
    processes_list = [p for p in (FULL_SYNC_PROCESSES if run.options.full else SYNC_PROCESSES)
                      if run.options.only_processes is None or p in run.options.only_processes]
    findings = {i: Findings() for i in ("completes", "replicas", "accuracy", "split", "exchange")}
    skipped = []
    for module, label in SYNC_MODULES.items():
        reason = run.missing(module) or (run.missing("my_ring_allreduce") if module == "sync_network" else None)
        if reason:
            skipped.append(f"{label} not run: {reason}")
            continue
        for processes in processes_list:
            outcome = run.job(f"sync-{module}-P{processes}", "sync", processes, "--module", module,
                              *settings_arguments(run))
            judge_sync(run, serial, outcome, f"{label} ({module}.py), P = {processes}", module, findings)
    for part, finding in findings.items():
        finding.details += skipped
        why = ("; ".join(skipped) or "no process count selected") if part == "completes" else \
            "no synchronous run finished (see sync.completes)"
        if part == "accuracy" and serial[0] is None:
            why = f"no serial accuracy to compare with: {serial[1]}"
            finding.judged = 0
        finding.fill(run.check(f"sync.{part}"), why, by_options=not processes_list)


def judge_sync(run, serial, outcome, label, module, findings):
    """File one sync run's findings under the five sync checks."""
    ranks = accuracies(outcome)
    tag = f"{short(module)} P = {outcome.job.processes}"
    failed, shared = outcome.status != "ok" or None in ranks, shared_buffers(outcome, label)
    if failed or shared:
        findings["completes"].failures.extend(shared + (failed_run(outcome, label) if failed else []))
        findings["completes"].facts.append(f"{tag}: failed")
        return
    findings["completes"].judged += 1
    findings["completes"].facts.append(f"{tag}: {ranks[0]['time']:.1f} s")
    replicas = findings["replicas"]
    replicas.judged += 1
    if len({r["digest"] for r in ranks}) > 1:
        replicas.failures.append(f"{label}: {differing_models(ranks)} (test accuracies "
                                 + ", ".join(f"{r['accuracy']:.2f} %" for r in ranks) + "); "
                                 + parting(outcome.calls, run.options.batches))
        replicas.facts.append(f"{tag}: ranks differ")
    else:
        replicas.facts.append("every rank's weights and biases hash alike in every run")
    judge_accuracy(findings["accuracy"], label, ranks[0]["accuracy"], serial, SYNC_BELOW_SERIAL)
    judge_split(outcome, label, tag, findings["split"])
    judge_exchange(run, outcome, label, tag, module, findings["exchange"])


def judge_accuracy(finding, label, accuracy, serial, allowed):
    """Rank 0's test accuracy at most `allowed` points below serial's mean (nothing judged without one)."""
    if serial[0] is None:
        return
    finding.judged += 1
    finding.accuracies.append(accuracy)
    finding.facts.append(f"serial {serial[0]:.2f} % (mean of {len(serial[1])} seeds)")
    line = f"{label}: rank 0 {accuracy:.2f} %"
    if accuracy < serial[0] - allowed:
        finding.failures.append(f"{line}, more than {allowed:g} points below serial's {serial[0]:.2f} %")
    else:
        finding.details.append(line)


START_APART = ("the ranks start from different parameters: make rank 0's initial parameters every rank's (e.g. a "
               "Bcast before training)")


def parting(calls, steps_per_epoch):
    """Where the replicas part, read off each step's parameter fingerprint (the driver's back_prop markers)."""
    prints = [[record.get("fp") for record in steps(rank_calls)] for rank_calls in calls]
    if not all(prints) or any(None in rank_prints for rank_prints in prints):
        return "where they part is unknown (no step fingerprints)"
    for index, column in enumerate(zip(*prints)):
        if len(set(column)) > 1:
            if index == 0:
                return START_APART
            return (f"they start equal and part at step {index + 1} (epoch {index // steps_per_epoch + 1}): the "
                    f"update after step {index} was not the same on every rank")
    return "they start every step equal and part at the last update"


def differing_models(ranks):
    """'ranks 0 and 2 alike, rank 1 alone' for ranks whose digests differ."""
    groups = {}
    for rank, result in enumerate(ranks):
        groups.setdefault(result["digest"], []).append(rank)
    if len(groups) == len(ranks):
        return "every rank ends with a model of its own"
    return "the ranks end with different models: " + "; ".join(
        f"ranks {', '.join(map(str, g))} alike" if len(g) > 1 else f"rank {g[0]} alone" for g in groups.values())


def judge_split(outcome, label, tag, finding):
    """Per step, the ranks' rows add up to mini_batch_size (and every rank took as many steps)."""
    rows = [[record["rows"] for record in steps(calls)] for calls in outcome.calls]
    finding.judged += 1
    if not any(rows):
        finding.failures.append(f"{label}: no forward_prop/back_prop call was seen (the steps cannot be counted)")
        return
    if len({len(r) for r in rows}) > 1:
        finding.failures.append(f"{label}: the ranks took different numbers of steps: {[len(r) for r in rows]}")
        return
    batch = SETTINGS["mini_batch_size"]
    sums = [sum(step) for step in zip(*rows)]
    wrong = [(index, total) for index, total in enumerate(sums) if total != batch]
    shares = "+".join(str(r[0]) for r in rows)
    if wrong:
        finding.failures.append(f"{label}: {len(wrong)} of {len(sums)} steps use {wrong[0][1]} rows over all ranks "
                                f"(first: step {wrong[0][0] + 1}, {shares}), not mini_batch_size = {batch}")
    finding.facts.append(f"{tag}: {shares} rows per step")


def judge_exchange(run, outcome, label, tag, module, finding):
    """The collective module exchanges by an MPI collective every step; the ring module by its
    ringallreduce, with no collective inside the training window beyond the epoch ends'."""
    window = training_window(outcome.calls)
    if window is None:
        return
    finding.judged += 1
    allowed = COLLECTIVES_PER_EPOCH * run.options.epochs
    collective = module == "sync_network_collective"
    used = set()
    for rank, calls in enumerate(outcome.calls):
        gaps = between_steps(calls)
        exchanged = [[c["f"] for c in gap if c.get("k") in ("collective", "collective-nb")] if collective
                     else ["ringallreduce" for c in gap if c.get("what") == "ringallreduce"] for gap in gaps]
        bare = sum(not names for names in exchanged)
        used.update(name for names in exchanged for name in names)
        if bare:
            what = "no MPI collective call" if collective else "no call of ringallreduce"
            finding.failures.append(f"{label}: rank {rank} made {what} between {bare} of its {len(gaps) + 1} steps")
        collectives = [] if collective else inside(calls, rank_window(calls, window), ("collective", "collective-nb"))
        if len(collectives) > allowed:
            finding.failures.append(f"{label}: rank {rank} made {len(collectives)} collective calls while training "
                                    f"(first: {collectives[0]['f']} at {collectives[0].get('at')}); at most "
                                    f"{allowed} ({COLLECTIVES_PER_EPOCH} per epoch end) are allowed")
    finding.facts.append(f"{short(module)}: {', '.join(sorted(used)) or 'nothing'} every step"
                         + ("" if collective else ", no collective"))


def between_steps(calls):
    """The calls between each two consecutive back_prop markers of a rank."""
    gaps, current = [], None
    for record in calls:
        if record.get("what") == "back_prop":
            if current is not None:
                gaps.append(current)
            current = []
        elif current is not None:
            current.append(record)
    return gaps


# ----------------------------------------------------------------------------- asynchronous

def check_async(run, serial):
    reason = run.missing("async_network")
    runs = [(m, p) for m, p in ASYNC_RUNS if run.options.only_processes is None or p in run.options.only_processes]
    if reason or not runs:
        for check_id in (i for i in run.checks if i.startswith("async.")):
            if reason and check_id != "async.ranks":
                run.check(check_id).cannot(reason)
            else:
                run.check(check_id).skip(f"not run: {reason}" if reason else "no process count selected")
        return
    findings = {i: Findings() for i in ("completes", "batches", "rules", "model", "ranks")}
    for masters, processes in runs:
        outcome = run.job(f"async-M{masters}-P{processes}", "async", processes, "--masters", masters,
                          *settings_arguments(run))
        judge_async(run, serial, outcome, masters, processes, findings)
    for part, finding in findings.items():
        check = run.check(f"async.{part}")
        if part == "ranks":
            check.status, check.summary = "info", "; ".join(finding.facts) or "no run finished"
            check.details = finding.warnings
        elif part == "model" and serial[0] is None:
            check.cannot(f"no serial accuracy to compare with: {serial[1]}")
        else:
            finding.fill(check, "no asynchronous run finished (see async.completes)")


def judge_async(run, serial, outcome, masters, processes, findings):
    label = f"{masters} master(s) on {processes} processes"
    tag = f"M = {masters}, P = {processes}"
    ranks = accuracies(outcome)
    completes = findings["completes"]
    shared = shared_buffers(outcome, label)
    if shared:  # a run that aborted on it (MPICH) and one that completed it (Open MPI) fail alike
        failed = outcome.status != "ok" or None in ranks
        completes.failures.extend(shared + (failed_run(outcome, label) if failed else []))
        completes.facts.append(f"{tag}: failed")
        return
    if outcome.status != "ok" or None in ranks:
        refusal = refused(outcome, masters, processes)
        if refusal:
            completes.judged += 1
            completes.facts.append(f"{tag}: refused")
            completes.details.append(f"{label}: refused, as allowed with fewer workers than masters: {refusal}")
        else:
            lines = failed_run(outcome, label)
            if processes - masters < masters:
                lines[-1] += (" (fewer workers than masters may be refused, but on purpose: a raise or assert "
                              "of the submission's own with a message, not an error the interpreter raises)")
            completes.failures.extend(lines)
            completes.facts.append(f"{tag}: failed")
        return
    completes.judged += 1
    completes.facts.append(f"{tag}: {ranks[0]['time']:.1f} s")
    judge_batches(run, outcome, label, tag, findings["batches"])
    judge_async_rules(run, outcome, label, findings["rules"])
    judge_accuracy(findings["model"], label, ranks[0]["accuracy"], serial, ASYNC_BELOW_SERIAL)
    untrained = [rank for rank, r in enumerate(ranks) if r["accuracy"] < UNTRAINED_BELOW]
    findings["ranks"].facts.append(f"{tag}: " + ", ".join(f"{r['accuracy']:.2f}" for r in ranks) + " %")
    if untrained:
        findings["ranks"].warnings.append(f"{label}: untrained (below {UNTRAINED_BELOW:.0f} %): "
                                          + ", ".join(f"rank {rank}" for rank in untrained)
                                          + "; the course's main.py prints every rank's accuracy")


def refused(outcome, masters, processes):
    """The reason a run with fewer workers than masters gave for stopping before training, if it stopped on
    purpose: an exception its own line raised with a message (driver.deliberate: `raise ValueError("...")`,
    `assert`, `sys.exit("...")`), or its MPI Abort after a printed message. An exception the interpreter
    raised (AttributeError, TypeError, ...) is a bug, not a refusal; so is NotImplementedError, the
    skeleton's stub."""
    if processes - masters >= masters or outcome.status == "hung" or any(steps(c) for c in outcome.calls):
        return None
    errors = [r for rank in outcome.results for r in rank if "error" in r]
    on_purpose = [f"{r['error']} at {r.get('at')}" for r in errors
                  if r.get("deliberate") and not r["error"].startswith("NotImplementedError")]
    if on_purpose:
        return on_purpose[0]
    aborts = [c for calls in outcome.calls for c in calls if c.get("f") == "Abort" and c.get("at")]
    printed = [line.strip() for line in outcome.stdout.splitlines() if line.strip()]
    if aborts and printed and not errors:
        return f"{printed[0]} (then MPI Abort at {aborts[0]['at']})"
    return None


def judge_batches(run, outcome, label, tag, finding):
    """back_prop calls over all ranks = number_of_batches x epochs."""
    finding.judged += 1
    per_rank = [len(steps(calls)) for calls in outcome.calls]
    expected = run.options.batches * run.options.epochs
    shares = ", ".join(f"rank {rank}: {count:,}" for rank, count in enumerate(per_rank) if count)
    if sum(per_rank) != expected:
        finding.failures.append(f"{label}: {sum(per_rank):,} mini-batches ({shares}); expected {expected:,} "
                                f"({run.options.batches} per epoch)")
        finding.facts.append(f"{tag}: {sum(per_rank):,} instead of {expected:,}")
    else:
        finding.facts.append(f"{run.options.batches} per epoch in every run")
        finding.details.append(f"{label}: {shares}")


def judge_async_rules(run, outcome, label, finding):
    """No blocking point-to-point call inside the training window; collectives only at epoch ends."""
    window = training_window(outcome.calls)
    finding.judged += 1
    if window is None:
        finding.failures.append(f"{label}: no back_prop call was seen (the training window cannot be found)")
        return
    allowed = COLLECTIVES_PER_EPOCH * run.options.epochs
    for rank, calls in enumerate(outcome.calls):
        own = rank_window(calls, window)
        blocking = inside(calls, own, ("p2p-blocking",))
        if blocking:
            places = sorted({f"{c['f']} at {c.get('at')}" for c in blocking})
            finding.failures.append(f"{label}: rank {rank} made {len(blocking):,} blocking point-to-point call(s) "
                                    f"while training: {'; '.join(places[:3])}")
            finding.facts += [f"blocking {place}" for place in places[:1]]
        collectives = inside(calls, own, ("collective", "collective-nb"))
        if len(collectives) > allowed:
            finding.failures.append(f"{label}: rank {rank} made {len(collectives)} collective calls while training "
                                    f"(first: {collectives[0]['f']} at {collectives[0].get('at')}); at most "
                                    f"{allowed} ({COLLECTIVES_PER_EPOCH} per epoch end) are allowed")
            finding.facts.append(f"collective {collectives[0]['f']} at {collectives[0].get('at')}")
    if not finding.failures:
        kinds = sorted({c["f"] for calls in outcome.calls for c in inside(calls, window, ("p2p", "wait", "test"))})
        finding.facts.append(f"while training only {', '.join(kinds)}")
