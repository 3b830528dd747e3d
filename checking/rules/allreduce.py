"""The allreduce checks (questions 1a, 1b, 12, 13): both functions against MPI's Allreduce.

One job per process count runs every case (cases.py) against MPI's Allreduce of the same input. A case
that hangs or raises ends its job; the job is run again without it and without the rest of its group
(e.g. every size below P), so a submission that hangs costs a stall timeout per group, not one per case,
and every other case is still judged. After two failed groups at one P, the function's remaining cases
at that P are not run. Every P is judged on its own (a ring that aborts at P = 1, where a rank is its own
neighbour, is still judged at P = 2-5); only when it passed nothing at two process counts in a row is it
not run at larger ones.

Judged per function from the results and the recorded calls between each case's markers:
    agrees   every rank's recv equals MPI's (floats within 2 P eps sum |x|; integers, max, products exact),
             and no send and receive in flight at once on one buffer (recording.py: MPICH aborts there)
    rules    no collective call (fail); blocking point-to-point calls are a warning (non-blocking when able)
    buffers  send unchanged; recv has no element left unwritten
    volume   elements sent per process, at n = 1,000 and 2^18 + 1: naive (P - 1)n exactly; ring
             2(P - 1)n/P, off by at most 2(P - 1)^2 elements for uneven chunks (a ring passing whole
             arrays sends (P - 1)n and fails from P = 3 on)
"""
import collections

from checking.running.cases import ALGORITHMS, OPS, allreduce_cases, size_class
from checking.running.jobs import call_text, last_error_line
from checking.running.recording import KINDS, shared_buffer_text

__all__ = ["check_allreduce", "elements_sent"]

SENDS = {name for name, kind in KINDS.items() if kind in ("p2p", "p2p-blocking")
         and "send" in name.lower() and not name.endswith("_init")}  # Isend, Send, Sendrecv, isend, ...
VOLUME_SIZES = (1000, 2 ** 18 + 1)  # large enough that how the chunks are rounded hardly matters
NAMES = {"naive": "allreduce", "ring": "ringallreduce"}
MAX_FAILED_GROUPS = 2
HOPELESS_IN_A_ROW = 2  # process counts in a row where a function passed nothing before larger ones are not run

Failure = collections.namedtuple("Failure", "case kind message waits")


class Attempts:
    """Every case of one P: its results per rank, its recorded calls per rank, how it failed if it did."""

    def __init__(self, processes, cases):
        self.processes, self.cases = processes, cases
        self.results = collections.defaultdict(dict)  # case index -> rank -> result record
        self.calls = collections.defaultdict(lambda: collections.defaultdict(list))  # case -> rank -> calls
        self.failures, self.not_run = {}, {}  # case index -> Failure; case index -> why it was not run
        self.ended_outside = False  # the job died outside any case (e.g. importing one of the functions)

    def add(self, outcome):
        """File one job's results and calls by case."""
        for rank, records in enumerate(outcome.results):
            for record in records:
                if "case" in record and "error" not in record:
                    self.results[record["case"]][rank] = record
        for rank, records in enumerate(outcome.calls):
            case = None
            for record in records:
                if record.get("what") == "case":
                    case = record["case"]
                elif record.get("what") == "case_end":
                    case = None
                elif case is not None:
                    self.calls[case][rank].append(record)

    def unfinished(self, outcome):
        """The case a failed job stopped in -> Failure, or None when it stopped outside any case."""
        errors = [record for rank in outcome.results for record in rank if "error" in record]
        for record in errors:
            if "case" in record:
                where = f" at {record['at']}" if record.get("at") else ""
                return Failure(record["case"], "raised", f"{record['error']}{where}", [])
        begun = [record["case"] for rank in outcome.calls for record in rank if record.get("what") == "case"]
        ended = {record["case"] for rank in outcome.calls for record in rank if record.get("what") == "case_end"}
        open_cases = [case for case in begun if case not in ended or any(
            case not in self.results or rank not in self.results[case] for rank in range(self.processes))]
        if not open_cases:
            return None
        kind = {"hung": "hangs", "timeout": "ran out of time"}.get(outcome.status, "crashed")
        message = "" if kind != "crashed" else last_error_line(outcome.stderr) + last_calls(outcome.calls)
        return Failure(max(open_cases), kind, message, outcome.waits)

    def give_up(self, failure, reason_of_skip):
        """Skip what the failure of one case makes pointless -> the case indices not to run again."""
        failed = self.cases[failure.case]
        self.failures[failure.case] = failure
        groups = {size_class(self.cases[c].size, self.processes) for c, f in self.failures.items()
                  if self.cases[c].algorithm == failed.algorithm}
        skipped = set()
        for case in self.cases:
            if case.algorithm != failed.algorithm or case.index in self.failures or case.index in self.results:
                continue
            if len(groups) >= MAX_FAILED_GROUPS or size_class(case.size, self.processes) == size_class(
                    failed.size, self.processes):
                self.not_run.setdefault(case.index, reason_of_skip(failed))
                skipped.add(case.index)
        return skipped

    def passed_any(self, algorithm):
        return any(self.cases[c].algorithm == algorithm and all(r.get("correct") for r in ranks.values())
                   for c, ranks in self.results.items())


def last_calls(calls):
    """'; rank 0's last MPI call: Isend(dest=0, ...) at file:line' for the ranks of a crashed job."""
    found = []
    for rank, records in enumerate(calls):
        made = [record for record in records if record.get("k") not in (None, "mark")]
        if made:
            found.append(f"rank {rank}'s last MPI call: {call_text(made[-1])} at {made[-1].get('at')}")
    return "".join(f"; {line}" for line in found)


def run_processes(run, processes, algorithms):
    """All cases for one P, rerunning after each failed case -> Attempts."""
    matrix = run.options.matrix
    cases = allreduce_cases(processes, algorithms, matrix)
    attempts, skip = Attempts(processes, cases), set()
    while True:
        outcome = run.job(f"allreduce-P{processes}", "allreduce", processes, "--algorithms", ",".join(algorithms),
                          "--matrix", matrix, "--skip", ",".join(map(str, sorted(skip))))
        attempts.add(outcome)
        done = outcome.status == "ok" and all(any(r.get("done") for r in rank) for rank in outcome.results)
        if done:
            return attempts
        skip |= {case for case, ranks in attempts.results.items() if len(ranks) == processes}  # done already
        failure = attempts.unfinished(outcome)
        if failure is None or failure.case in skip:  # it failed outside any case: nothing left to learn
            for case in cases:
                if case.index not in attempts.results and case.index not in skip:
                    attempts.ended_outside = True
                    attempts.not_run[case.index] = f"the job ended outside a case ({outcome.status}): " + (
                        last_error_line(outcome.stderr) or "; ".join(outcome.waits))
            return attempts
        skip |= {failure.case} | attempts.give_up(
            failure, lambda failed: f"not run after the failure at n = {failed.size:,} ({failed.dtype}, "
                                    f"{OPS.get(failed.op, (0, 0, failed.op))[2]})")


def check_allreduce(run):
    """Run and judge the naive and ring checks that were asked for."""
    wanted = [a for a in ALGORITHMS if run.runs(*(f"{a}.{p}" for p in ("agrees", "rules", "buffers", "volume")))]
    runnable = []
    for algorithm in wanted:
        reason = run.missing(ALGORITHMS[algorithm][0])
        if reason:
            for part in ("agrees", "rules", "buffers", "volume"):
                if f"{algorithm}.{part}" in run.checks:
                    run.check(f"{algorithm}.{part}").cannot(reason)
        else:
            runnable.append(algorithm)
    if not runnable:
        return
    by_processes, failed_in_a_row = [], {a: [] for a in runnable}  # (P, Attempts); the P's in a row that passed nothing
    for processes in run.options.processes:
        active = [a for a in runnable if len(failed_in_a_row[a]) < HOPELESS_IN_A_ROW]
        if not active:
            break
        attempts = run_processes(run, processes, active)
        if attempts.ended_outside and len(active) > 1:  # one function's crash outside a case must not sink the other
            separate = {a: run_processes(run, processes, [a]) for a in active}
        else:
            separate = dict.fromkeys(active, attempts)
        by_processes += [(processes, each) for each in {id(each): each for each in separate.values()}.values()]
        for a, each in separate.items():
            hopeless = not each.passed_any(a) and (each.ended_outside or sum(
                each.cases[c].algorithm == a for c in each.failures) >= MAX_FAILED_GROUPS)
            failed_in_a_row[a] = failed_in_a_row[a] + [processes] if hopeless else []
    for algorithm in runnable:
        judge(run, algorithm, by_processes, failed_in_a_row[algorithm])


def judge(run, algorithm, by_processes, failed_in_a_row):
    """Fill the four checks of one function from every P's attempts."""
    name = NAMES[algorithm]
    wrong, damaged, collectives, blocking, volume_failures, volume_table = [], [], [], [], [], []
    counted = 0
    for processes, attempts in by_processes:
        cases = [c for c in attempts.cases if c.algorithm == algorithm]
        counted += len(cases)
        judge_results(name, processes, cases, attempts, wrong, damaged)
        judge_rules(name, processes, cases, attempts, collectives, blocking)
        judge_volume(algorithm, processes, cases, attempts, volume_failures, volume_table)
    ran = [p for p, attempts in by_processes if any(c.algorithm == algorithm for c in attempts.cases)]
    tried = ", ".join(map(str, ran))
    later = [p for p in run.options.processes if p not in ran] if len(failed_in_a_row) >= HOPELESS_IN_A_ROW else []
    if later:
        wrong.append((f"{name} not run at P = {', '.join(map(str, later))}: it passed no case at P = "
                      f"{' and '.join(map(str, failed_in_a_row))}", None, failed_in_a_row[-1]))
    verdicts = {
        "agrees": (grouped(wrong), f"P = {tried}: {counted} cases against MPI's Allreduce"
                   + (f", {len(wrong)} wrong or unfinished" if wrong else ", all agree"), ()),
        "rules": (grouped(collectives), "collective calls: " + ("used" if collectives else "none")
                  + ("; blocking calls: used" if blocking else ""), grouped(blocking)),
        "buffers": (grouped(damaged), f"{len(damaged)} case(s) with a problem" if damaged
                    else "send unchanged and recv filled in every case run", ()),
        "volume": ([line for _, line, _ in volume_failures], "per process as predicted at n = 1,000 and 2^18 + 1"
                   if not volume_failures else "not as predicted at P = "
                   + ", ".join(str(p) for _, _, p in volume_failures), ()),
    }
    completed = sum(len(ranks) == processes for processes, attempts in by_processes
                    for case, ranks in attempts.results.items() if attempts.cases[case].algorithm == algorithm)
    for part, (failures, summary, warnings) in verdicts.items():
        check = run.check(f"{algorithm}.{part}")
        if part != "agrees" and not completed:
            check.cannot(f"no case completed (see {algorithm}.agrees)")
            continue
        if part == "volume" and not volume_table and not volume_failures:
            check.skip("counted with more than one process only")
            continue
        check.judge(failures, summary, warnings, volume_table if part == "volume" else ())
        first = min((p for _, _, p in {"agrees": wrong, "rules": collectives, "buffers": damaged,
                                       "volume": volume_failures}[part]), default=None)
        if first is not None:
            check.command = run.reproduce(check.id, [first])


def grouped(findings):
    """Findings (problem, example) -> one line per problem: how many cases, at which P, one example."""
    problems = {}
    for problem, example, processes in findings:
        entry = problems.setdefault(problem, [0, example, set()])
        entry[0] += 1
        entry[2].add(processes)
    return [problem if count == 1 and example is None else
            f"{problem}: {count} case(s) at P = {', '.join(map(str, sorted(ps)))}" + (f"; first: {example}"
                                                                                    if example else "")
            for problem, (count, example, ps) in problems.items()]


def describe(case):
    return f"n = {case.size:,}, {case.dtype}, {OPS.get(case.op, (0, 0, case.op))[2]}" + (
        f", {case.buffer}" if case.buffer else "")


def judge_results(name, processes, cases, attempts, wrong, damaged):
    """agrees and buffers, as (problem, example, P): hangs and crashes named with where each rank waits."""
    for case in cases:
        where = f"P = {processes}, {describe(case)}"
        wrong += shared_buffers(name, where, processes, attempts.calls.get(case.index, {}))
        failure = attempts.failures.get(case.index)
        if failure is not None:
            group = size_class(case.size, processes)
            text = f"{name} {failure.kind} at P = {processes}, {describe(case)}" + (
                f" ({group})" if not group.startswith("n = ") else "")
            wrong.append((text + (f": {failure.message}" if failure.message else "")
                          + "".join(f"\n    {line}" for line in failure.waits), None, processes))
            continue
        if case.index in attempts.not_run:
            continue
        ranks = attempts.results.get(case.index, {})
        if case.buffer is not None and "raised" in next(iter(ranks.values()), {}):
            judge_bad_call(where, ranks, attempts.calls[case.index], wrong)
            continue
        differing = [rank for rank, result in sorted(ranks.items()) if not result["correct"]]
        if differing:
            worst = max(ranks[rank]["worst"] for rank in differing)
            wrong.append((f"{name} differs from MPI's Allreduce", f"{where}, ranks {differing}, by up to {worst:.3g}",
                          processes))
        for key, problem in (("unwritten", "recv left partly unwritten"), ("send_changed", "send was modified")):
            ranks_hit = [rank for rank, result in sorted(ranks.items()) if result[key]]
            if ranks_hit:
                damaged.append((f"{name}: {problem}", f"{where}, ranks {ranks_hit}", processes))
    skipped = collections.Counter(attempts.not_run[c.index] for c in cases if c.index in attempts.not_run)
    wrong += [(f"{name} at P = {processes}: {count} case(s) {reason}", None, processes)
              for reason, count in skipped.items()]


def shared_buffers(name, where, processes, calls):
    """(problem, example, P) per send and receive posted through one buffer in a case: a failure whether the
    MPI aborts on it (MPICH) or completes it (Open MPI), in the same words."""
    return [(f"{name} {shared_buffer_text(call)}", f"{where}, rank {rank}", processes)
            for rank, rank_calls in sorted(calls.items()) for call in rank_calls if "overlaps" in call]


def judge_bad_call(where, ranks, calls, wrong):
    """This project's contract: a bad call raises ValueError before any message, leaving none pending."""
    processes = len(ranks)
    for rank, result in sorted(ranks.items()):
        if result["raised"] != "ValueError":
            wrong.append((f"a bad call raised {result['raised']} instead of ValueError", where, processes))
        if result["pending"] or any(call.get("f") in SENDS for call in calls.get(rank, [])):
            wrong.append(("a bad call sent a message before raising", where, processes))


def judge_rules(name, processes, cases, attempts, collectives, blocking):
    """No collective communication inside the function; blocking point-to-point calls noted."""
    for case in cases:
        for rank_calls in attempts.calls[case.index].values():
            for call in rank_calls:
                if call.get("k") in ("collective", "collective-nb"):
                    collectives.append((f"{name} calls the collective {call['f']} at {call.get('at')}", None,
                                        processes))
                elif call.get("k") == "p2p-blocking":
                    blocking.append((f"{name} calls the blocking {call['f']} at {call.get('at')} (non-blocking "
                                     f"calls where they help, the assignment asks)", None, processes))


def elements_sent(calls, itemsize):
    """Elements a rank's recorded calls passed to sends (a bytes buffer counts its bytes / itemsize)."""
    return sum(call.get("n", 0) / (itemsize if call.get("dt") == "bytes" else 1)
               for call in calls if call.get("f") in SENDS)


def predicted(algorithm, processes, size):
    """-> (elements per process, how far a correct count may be off)."""
    if algorithm == "naive":
        return (processes - 1) * size, 0
    return 2 * (processes - 1) * size / processes, 2 * (processes - 1) ** 2


def judge_volume(algorithm, processes, cases, attempts, failures, table):
    """Elements each rank sent at the large sizes, against question 12's or 13's formula: one line per P."""
    if processes == 1:
        return
    parts, wrong, largest = [], False, 0
    for case in cases:
        if case.size not in VOLUME_SIZES or case.buffer or case.index not in attempts.results:
            continue
        calls = attempts.calls.get(case.index, {})
        itemsize = 4 if case.dtype.endswith("32") else 8
        sent = [elements_sent(calls.get(rank, []), itemsize) for rank in range(processes)]
        expected, slack = predicted(algorithm, processes, case.size)
        wrong |= any(abs(s - expected) > slack for s in sent)
        largest = max([largest] + [call.get("n", 0) for rank in calls.values() for call in rank
                                   if call.get("f") in SENDS and call.get("dt") != "bytes"])
        if case.dtype == "float64" and case.op == "sum":
            spread = f"{min(sent):,.0f}" + (f"-{max(sent):,.0f}" if max(sent) != min(sent) else "")
            parts.append(f"n = {case.size:,}: {spread} (predicted {expected:,.0f})")
    if not parts:
        return
    line = f"P = {processes}, elements sent per process: " + "; ".join(parts)
    if not wrong:
        table.append(line)
    else:
        whole = algorithm == "ring" and largest >= max(VOLUME_SIZES)
        failures.append((None, line + ("; its largest message held the whole array, not a chunk of about n/P"
                                       if whole else ""), processes))
