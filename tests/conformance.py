"""Helpers of tests/allgather_check.py: bad calls, digests, the report (the allreduce is check_submission.py's)."""
import hashlib
import json

import numpy as np
from mpi4py import MPI


def digest(array):
    """A short fingerprint of `array`'s bits, to compare results across ranks."""
    return hashlib.blake2b(np.ascontiguousarray(array), digest_size=16).digest()


def rejected(label, module, call):
    """`call()` must raise ValueError before `module` counts a byte sent -> the failures (none if so)."""
    failures, sent_before = [], module.bytes_sent
    try:
        call()
        failures.append(f"{label}: no ValueError")
    except ValueError:
        pass
    if module.bytes_sent != sent_before:
        failures.append(f"{label}: sent data before raising")
    return failures


def nothing_pending(comm):
    """After the bad calls on every rank, no message may be left in flight -> the failures."""
    comm.Barrier()
    return ["a message is pending after the bad calls"] if comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG) else []


def report(comm, cases, digests, failures):
    """Gather every rank's (where, digest) list and failures; rank 0 adds the results whose bits differ
    between ranks and prints one JSON object: processes, cases checked, failures."""
    everyone = comm.gather((digests, failures), root=0)
    if comm.Get_rank() != 0:
        return
    failures = {f for _, rank_failures in everyone for f in rank_failures}
    for index, (where, bits) in enumerate(digests):
        if any(other[index][1] != bits for other, _ in everyone[1:]):
            failures.add(f"{where}: ranks hold different bits")
    print(json.dumps({"processes": comm.Get_size(), "cases": cases, "failures": sorted(failures)}))
