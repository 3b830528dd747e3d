"""Star-import every module the way the course's files do, after `from time import time`.

    python3 tests/course_imports.py

Prints one JSON line: whether `time` is still the caller's function, and every name the star
imports brought, per module.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from time import time  # noqa: E402

MODULES = ["network", "sync_network", "sync_network_collective", "async_network",
           "my_naive_allreduce", "my_ring_allreduce", "utils"]

brought = {}
for module in MODULES:
    before = set(globals())
    exec(f"from {module} import *")
    brought[module] = sorted(set(globals()) - before - {"before"})
time_ok = callable(time) and isinstance(time(), float)
modules_leaked = sorted(name for name, value in globals().items()
                        if type(value) is type(sys) and name not in ("sys", "os", "json"))
print(json.dumps({"time_is_callers": time_ok, "brought": brought, "modules_leaked": modules_leaked}))
