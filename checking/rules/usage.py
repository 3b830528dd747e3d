"""MPI usage errors, as MPI correctness tools (MUST, Intel Trace Analyzer's checker) report them.

They run to the end and give plausible numbers, so no other check sees them. Every job that runs the
student's functions (allreduce cases, sync and async training) reports them per rank when the function
under test or `fit` returns (driver.close_scope, from what recording.py kept):

    mpi.requests    a non-blocking call whose request no Wait or Test completed (fail). mpi4py then lets the
                    buffer go while MPI may still read or write it: for a message over the eager limit (a
                    784x128 float64 layer is 800 KB) that is silent corruption, and a pending Irecv into the
                    model means the model is read before its data arrives.
    mpi.in_flight   a send buffer whose (sampled) digest differs between the Isend and its completion (fail):
                    the receiver may get a mix of old and new values.
    mpi.unreceived  messages left for a rank that nobody received, drained with Improbe once every rank has
                    returned (warning): wasted traffic at best, a protocol out of step at worst.

These checks judge the jobs the other selected checks ran; asked for alone (`--only mpi`), every job runs.
"""
from checking.running.recording import DIGEST_EVERY, DIGEST_FIRST

__all__ = ["USAGE_CHECKS", "check_usage", "judge_usage"]

USAGE_CHECKS = ("mpi.requests", "mpi.in_flight", "mpi.unreceived")
JOB_TASKS = ("allreduce", "sync", "async")
SYNC_LABELS = {"sync_network_collective": "collective module", "sync_network": "ring module"}


def check_usage(run):
    """Fill the three checks from every job's usage records."""
    wanted = [check_id for check_id in USAGE_CHECKS if check_id in run.checks]
    if not wanted:
        return
    jobs = [outcome for outcome in run.outcomes if outcome.job.task in JOB_TASKS]
    findings = judge_usage(jobs)
    scopes = sum(1 for outcome in jobs for rank in outcome.results for record in rank
                 if "accuracy" in record or "correct" in record or "raised" in record)
    for check_id in wanted:
        check = run.check(check_id)
        if not scopes:
            check.cannot("no allreduce case or training run of the submission finished (see the checks above)")
            continue
        lines = findings[check_id]
        summary = (f"{len(lines)} kind(s) of misuse" if lines else "none") + f" in {len(jobs)} job(s)"
        if check_id == "mpi.unreceived":
            check.judge([], summary, warnings=lines)
        else:
            check.judge(lines, summary)


def judge_usage(outcomes):
    """-> {check id: one line per kind of misuse}, each with its file:line, counts, ranks and an example."""
    groups = {check_id: {} for check_id in USAGE_CHECKS}
    for outcome in outcomes:
        label = job_label(outcome)
        for rank, records in enumerate(outcome.results):
            for record in records:
                kind = record.get("usage")
                if kind is None:
                    continue
                check_id = {"pending": "mpi.requests", "in_flight": "mpi.in_flight",
                            "unreceived": "mpi.unreceived"}[kind]
                where = label(record)
                key = (where,) + ((record["source"],) if kind == "unreceived" else
                                  (record["f"], record.get("at"), record.get("dropped", False)))
                entry = groups[check_id].setdefault(key, {"count": 0, "ranks": set(), "tags": set(),
                                                          "example": (rank, record)})
                entry["count"] += record["count"]
                entry["ranks"].add(rank)
                entry["tags"].add(record.get("tag"))
    return {check_id: [line(check_id, key, entry) for key, entry in found.items()]
            for check_id, found in groups.items()}


def job_label(outcome):
    """-> label(record): where a record was made ('ringallreduce at P = 3', 'ring module (...), P = 2')."""
    arguments, processes = list(map(str, outcome.job.arguments)), outcome.job.processes

    def value(flag):
        return arguments[arguments.index(flag) + 1] if flag in arguments else None

    if outcome.job.task == "sync":
        module = value("--module")
        return lambda record: f"{SYNC_LABELS.get(module, module)} ({module}.py), P = {processes}"
    if outcome.job.task == "async":
        return lambda record: f"{value('--masters')} master(s) on {processes} processes"
    return lambda record: f"{record.get('function', 'the allreduce')} at P = {processes}"


def returned(record):
    return f"{record.get('function', 'the allreduce')} returned" if record.get("scope") == "case" else \
        "fit returned"


def call_text(record):
    """'Isend to rank 2 (tag 12, 87,382 float64)' for a request's record."""
    receives = record["f"].lower().startswith("irecv")
    peer = record.get("peer")
    parts = [f"tag {record['tag']}"] if "tag" in record else []
    if "n" in record:
        parts.append(f"{record['n']:,} {record['dt']}")
    toward = f" {'from' if receives else 'to'} rank {peer}" if peer is not None else ""
    return f"{record['f']}{toward}" + (f" ({', '.join(parts)})" if parts else "")


def line(check_id, key, entry):
    """One sheet line for one kind of misuse: where, how often, on which ranks, then one example."""
    where, count, ranks = key[0], entry["count"], ", ".join(map(str, sorted(entry["ranks"])))
    rank, record = entry["example"]
    times = f"{count:,} time(s) on rank(s) {ranks}"
    if check_id == "mpi.unreceived":
        tags = sorted(t for t in entry["tags"] if t is not None)
        tag_text = f"tag {tags[0]}" if len(tags) == 1 else f"tags {tags[0]}-{tags[-1]}"
        return (f"{where}: {count:,} message(s) from rank {key[1]} ({tag_text}) never received by rank(s) {ranks} "
                f"when {returned(record)}")
    if check_id == "mpi.in_flight":
        subject = f"rank {rank}'s {record['into']}" if record.get("into") else f"the send buffer of rank {rank}'s"
        return (f"{where}: a send buffer changed while its message was in flight, {times} among the sends "
                f"digested (the first {DIGEST_FIRST} of each line, then one in {DIGEST_EVERY}); e.g. {subject} "
                f"{call_text(record)} at {record.get('at')} changed before the request completed at "
                f"{record.get('completed_at')}")
    dropped = " (its request was dropped)" if record.get("dropped") else ""
    if record.get("into"):
        example = (f"rank {rank}'s {record['into']} still had an {record['f']} from rank {record.get('peer')} "
                   f"({record.get('at')}) pending when {returned(record)}")
    else:
        example = f"rank {rank}'s {call_text(record)} at {record.get('at')} was never completed{dropped}"
    return f"{where}: a request never completed, {times}; e.g. {example}"
