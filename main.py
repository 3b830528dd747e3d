"""Train the MNIST perceptron serially, synchronously (data parallel) or with a parameter server.

Usage:
    python3 main.py serial [options]
    mpiexec -n <nprocs> python3 main.py sync [--allreduce ring|naive|mpi] [options]
    mpiexec -n <nprocs> python3 main.py async <masters> [--many-workers] [options]
    srun -n <nprocs> --mpi=pmi2 python3 main.py sync [options]

With no options every mode runs the course's algorithm on the course's experiment; each option that
departs from the algorithm says so in --help, and the --json record lists the run's departures
(empty for the course's). async --many-workers turns on the departures the report recommends.
Rank 0 prints one line per epoch, the training time and the test accuracy; other ranks stay quiet.
"""
import os

# One BLAS/OpenMP thread per process unless the user says otherwise: ranks share the cores, and
# for this small network one thread is fastest even alone. Must happen before numpy is imported.
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                  "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import secrets  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from large_batch import PRESETS, WEAK_PRESET  # noqa: E402
from network import NeuralNetwork  # noqa: E402
from utils import DataError, launcher_rank, load_mnist, peak_rss_mb  # noqa: E402
from tracing import Tracer  # noqa: E402
from watchdog import DEFAULT_STALL_TIMEOUT  # noqa: E402

INPUT_ERROR_EXIT = 2  # bad arguments or data, as argparse does
FAILURE_EXIT = 1
ABORT_GRACE = 0.2  # seconds between the error line and the abort


class RankZeroParser(argparse.ArgumentParser):
    """An argument parser whose error goes to stderr on rank 0 only, as one line, exit code 2."""

    def error(self, message):
        if launcher_rank() == 0:
            print(f"{self.prog}: error: {message}", file=sys.stderr, flush=True)
        sys.exit(INPUT_ERROR_EXIT)


def layer_list(text):
    """'784,128,64,10' -> [784, 128, 64, 10]; at least two positive sizes."""
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if len(sizes) < 2 or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"need at least two positive layer sizes: {text!r}")
    return sizes


def bounded(kind, low, name=None):
    """An argparse type: `kind(text)` that must be >= low."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value >= low:
            raise argparse.ArgumentTypeError(f"must be at least {low}: {text!r}")
        return value
    parse.__name__ = name or kind.__name__
    return parse


def common_arguments():
    """The options every mode takes; defaults are the course's experiment."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("training")
    group.add_argument("--epochs", type=bounded(int, 0), default=5, help="epochs (default 5)")
    group.add_argument("--batches", type=bounded(int, 0), default=632,
                       help="mini-batches per epoch (default 632)")
    group.add_argument("--batch-size", type=bounded(int, 1), default=16,
                       help="samples per mini-batch (default 16)")
    group.add_argument("--lr", type=bounded(float, 1e-300, "positive float"), default=0.1,
                       help="learning rate; gradients are summed over the mini-batch (default 0.1)")
    group.add_argument("--layers", type=layer_list, default=[784, 128, 64, 10],
                       help="neurons per layer (default 784,128,64,10)")
    group.add_argument("--seed", type=bounded(int, 0), default=None,
                       help="seed for initialisation and sampling (default: random, recorded in --json)")
    group.add_argument("--dtype", choices=["float64", "float32"], default="float64",
                       help="floating-point type (default float64)")
    group.add_argument("--data-dir", default=None,
                       help="folder with the four MNIST IDX files (default $MNIST_DIR or data/mnist)")
    output = common.add_argument_group("output")
    output.add_argument("--save", metavar="PATH", help="write the final parameters to PATH (.npz)")
    output.add_argument("--json", metavar="PATH", help="write a machine-readable record of the run")
    output.add_argument("--checkpoint", metavar="PATH",
                        help="after every epoch write model, position and random state to PATH "
                             "(atomically); on SIGTERM stop at the next epoch end and exit cleanly")
    output.add_argument("--resume", metavar="PATH", help="continue the run saved in checkpoint PATH")
    output.add_argument("--trace", metavar="PATH",
                        help="write a per-rank timeline of the run to PATH (Chrome trace-event JSON: "
                             "drag it onto ui.perfetto.dev)")
    return common


def parse_args(argv=None):
    """Parse the command line; on a bad argument rank 0 prints one line and every rank exits 2."""
    common = common_arguments()
    parser = RankZeroParser(description=__doc__.split("\n\n")[0], parents=[common])
    modes = parser.add_subparsers(dest="mode", required=True, metavar="{serial,sync,async}",
                                  parser_class=RankZeroParser)
    serial = modes.add_parser("serial", parents=[common], help="one process, SGD")
    add_large_batch_arguments(serial, default="off")
    sync = modes.add_parser("sync", parents=[common], help="synchronous data parallelism (allreduce)")
    sync.add_argument("--allreduce", choices=["ring", "naive", "mpi"], default="ring",
                      help="which allreduce sums the gradients (default ring)")
    sync.add_argument("--scaling", choices=["strong", "weak"], default="strong",
                      help="strong: split each mini-batch over the ranks (Amdahl), the course's; weak "
                           "(a departure, question 4's other approach): a whole mini-batch per rank, "
                           "fewer steps per epoch (Gustafson) (default strong)")
    sync.add_argument("--weak-steps", choices=["fewer", "all"], default="fewer",
                      help="weak scaling's epoch: fewer, ceil(batches/P) steps, the course's samples; all, "
                           "every one of --batches steps, P times the samples (use --large-batch mean) "
                           "(default fewer)")
    sync.add_argument("--exchange", choices=["gradients", "factors", "auto"], default=None,
                      help=EXCHANGE_HELP)
    add_wait_argument(sync)
    add_large_batch_arguments(sync, default=None)
    asynchronous = modes.add_parser("async", parents=[common], help="asynchronous parameter server")
    add_wait_argument(asynchronous)
    asynchronous.add_argument("masters", type=bounded(int, 1), help="number of master processes")
    add_async_arguments(asynchronous)
    args = parser.parse_args(argv)
    return resolve_async_settings(args) if args.mode == "async" else args


EXCHANGE_HELP = (
    "what the ranks exchange each step. gradients: allreduce the whole gradient, 109,386 numbers "
    "for the default network whatever the batch (the course's design). factors (a departure, a "
    "smaller message for small batches): allgather each "
    "sample's layer inputs and deltas (sufficient factors), 1,178 numbers per sample for the "
    "default network, from which every rank computes the serial network's gradient (bit for bit "
    "where the BLAS sums a row alike whatever the row count, see docs/sync-factors.md); "
    "the message grows with the samples per step, so factors are smaller only below about 93 "
    "samples per step (global batch: --batch-size, times the processes with --scaling weak). "
    "auto: whichever message has fewer elements (default: auto with --scaling weak, where it was "
    "the faster at P = 2 and 4, docs/sync.md; else gradients)")


def warmup_length(text):
    """--warmup: a whole number of steps, or a fraction of the run's steps below 1."""
    value = bounded(float, 0, "non-negative number")(text)
    if value >= 1 and value != int(value):
        raise argparse.ArgumentTypeError(f"steps must be a whole number (or a fraction below 1): {text!r}")
    return value


def momentum_factor(text):
    """--momentum: the heavy-ball beta, 0 <= beta < 1."""
    value = bounded(float, 0, "non-negative float")(text)
    if not value < 1:
        raise argparse.ArgumentTypeError(f"must be below 1: {text!r}")
    return value


def trust_eta(text):
    """--lars: a positive eta, or 'off' (0.0, no trust ratio)."""
    return 0.0 if text == "off" else bounded(float, 1e-300, "positive float or 'off'")(text)


def add_large_batch_arguments(parser, default):
    """--large-batch and the constants it sets (large_batch.py); given ones override the preset's."""
    names = "; ".join(f"{name}: step {rule.step_growth}, warm-up {rule.warmup:g}, momentum {rule.momentum:g}, "
                      f"lars {rule.lars:g}" for name, rule in PRESETS.items() if name not in ("off", "mean"))
    group = parser.add_argument_group("large batches (large_batch.py, docs/sync.md)")
    group.add_argument("--large-batch", choices=list(PRESETS), default=default,
                       help="update rule. off: plain SGD, the course's (weak scaling: step "
                            f"lr*min(1, 2/P)); mean: plain SGD, weak scaling's step lr/P, serial's on the "
                            f"mean of the ranks' sums; {names} (a departure, to keep weak scaling's large "
                            "batches training). Default: " + (default if default else
                                                     f"{WEAK_PRESET} with --scaling weak, else off"))
    group.add_argument("--warmup", type=warmup_length, default=None, metavar="STEPS|FRACTION",
                       help="raise the step linearly over the first STEPS steps (below 1: that "
                            "fraction of the run's steps); 0 = none (default: the rule's)")
    group.add_argument("--momentum", type=momentum_factor, default=None, metavar="BETA",
                       help="heavy-ball momentum, 0 <= BETA < 1: v = BETA*v + step; "
                            "0 = none (default: the rule's)")
    group.add_argument("--lars", type=trust_eta, default=None, metavar="ETA",
                       help="per-layer trust ratio: each layer's step is at most ETA times the "
                            "layer's norm; off = none (default: the rule's)")


def add_wait_argument(parser):
    """--wait: how a rank waits for messages (waiting.py); --stall-timeout: the watchdog."""
    parser.add_argument("--stall-timeout", type=bounded(float, 0, "non-negative float"),
                        default=DEFAULT_STALL_TIMEOUT, metavar="SECONDS",
                        help="end the job, naming the rank and phase, when one wait for a message "
                             f"lasts this long (a stalled peer); 0 = never (default {DEFAULT_STALL_TIMEOUT:g})")
    parser.add_argument("--wait", choices=["spin", "yield", "auto"], default="auto",
                        help="spin: MPI's busy-polling waits (fastest with a core per process); "
                             "yield: give the core away while waiting (for more processes than "
                             "cores); auto: spin unless this node has more ranks than cores (default)")


def add_async_arguments(parser):
    """Options of the parameter server; the defaults are the course's algorithm, each option a departure.

    The departures default to argparse.SUPPRESS, so resolve_async_settings can tell an option given
    (which wins) from one left to --many-workers or to the course's default.
    """
    course = parser.add_argument_group(
        "the course's algorithm and its departures",
        "With none of these options async runs the assignment's Part 2: whole layers divided between "
        "the masters, each gradient applied as it arrives with the full step, no staleness bound, each "
        "worker computing, pushing every layer's gradient, then pulling every layer. Each option below "
        "that departs from it says so and why; docs/async.md holds the measurements.")
    course.add_argument("--many-workers", action="store_true",
                        help="departs from the course's algorithm: the set the report recommends, "
                             "--shard balanced --compensation 4 --max-staleness 3 --pipeline auto "
                             "(lr rule constant). The course's algorithm, plain asynchronous SGD, ended "
                             "at 37 %% with 6 workers and 9.6 %% with 12; this set kept every measured run "
                             "with 2 to 12 workers above 91 %% (docs/async.md). Options given beside it win")
    course.add_argument("--shard", choices=["layers", "balanced"], default=argparse.SUPPRESS,
                        help="who owns which parameters. layers: the course's whole layers, round robin "
                             "(master m owns layers m, m+M, ...; layer 0, the input, has none), so one "
                             "master holds 92 %% of the parameters and a master may own nothing; "
                             "balanced (a departure, to share the load): M contiguous shards of equal "
                             "parameter count, which made more updates per second (default layers)")
    course.add_argument("--compensation", type=bounded(float, 0, "non-negative float"),
                        default=argparse.SUPPRESS, metavar="L",
                        help="delay compensation (a departure, against divergence with many workers): a "
                             "master corrects a stale gradient g by L*g*g*(w_now - w_pulled)/lr; 0 = off, "
                             "the course's full step (default 0)")
    course.add_argument("--max-staleness", type=bounded(int, 0), default=argparse.SUPPRESS, metavar="S",
                        help="staleness bound (a departure, which with the compensation kept 12 workers "
                             "training): at most S updates between a worker's pull and its push, so at "
                             "most S+1 workers compute at a time; 0 = one at a time (serial SGD) "
                             "(default: no bound, the course's)")
    course.add_argument("--unbounded", dest="max_staleness", action="store_const", const=None,
                        default=argparse.SUPPRESS,
                        help="no staleness bound, the course's (the default; kept for older command lines)")
    course.add_argument("--lr-rule", choices=["constant", "staleness", "workers"], default=argparse.SUPPRESS,
                        help="factor on a gradient that is tau updates stale: constant 1, the course's "
                             "full step; staleness 1/(1+tau) and workers 1/W are departures, stable but "
                             "slow to train (default constant)")
    course.add_argument("--pipeline", choices=["0", "1", "auto"], default=argparse.SUPPRESS,
                        help="0: a worker waits for the fresh parameters before its next gradient, the "
                             "course's algorithm; 1 (a departure, for speed): it computes its next "
                             "gradient on the parameters it holds while the fresh ones are in flight, one "
                             "update staler, faster with a core per rank and slower time-sharing cores; "
                             "auto: 1 when every rank has a core of its own, else 0 (default 0)")


def resolve_async_settings(args):
    """Fill in the async settings not given: --many-workers' set if asked for, else the course's."""
    from async_network import COURSE_ALGORITHM, MANY_WORKERS
    for name, course in COURSE_ALGORITHM.items():
        if not hasattr(args, name):
            setattr(args, name, MANY_WORKERS.get(name, course) if args.many_workers else course)
    if args.pipeline != "auto":
        args.pipeline = int(args.pipeline)
    return args


def network_settings(args, seed):
    """Keyword arguments for the network classes from the command line."""
    return dict(sizes=args.layers, learning_rate=args.lr, mini_batch_size=args.batch_size,
                number_of_batches=args.batches, epochs=args.epochs, seed=seed, dtype=args.dtype)


def large_batch_settings(args):
    """Keyword arguments of the update rule (serial and sync only); weak scaling's default is the preset."""
    rule = args.large_batch
    if rule is None:
        rule = WEAK_PRESET if getattr(args, "scaling", None) == "weak" else "off"
    return dict(large_batch=rule, warmup=args.warmup, momentum=args.momentum, lars=args.lars)


def build_network(args, seed):
    """The network class the mode asks for, constructed from the command line."""
    settings = network_settings(args, seed)
    if args.mode == "serial":
        return NeuralNetwork(**settings, **large_batch_settings(args))
    if args.mode == "sync":
        return build_sync_network(args, settings)
    if args.mode == "async":
        from async_network import AsynchronicNeuralNetwork
        return AsynchronicNeuralNetwork(**settings, number_of_masters=args.masters,
                                        compensation=args.compensation,
                                        max_staleness=args.max_staleness, lr_rule=args.lr_rule,
                                        wait=args.wait, stall_timeout=args.stall_timeout,
                                        shard=args.shard, pipeline=args.pipeline)
    raise NotImplementedError(f"mode {args.mode} is not available yet")


def exchange_setting(args):
    """--exchange, or its default: auto under weak scaling (the faster there, docs/sync.md), else gradients."""
    return args.exchange or ("auto" if args.scaling == "weak" else "gradients")


def build_sync_network(args, settings):
    """SynchronicNeuralNetwork over the allreduce the user chose (ring, naive or MPI's)."""
    settings.update(scaling=args.scaling, weak_steps=args.weak_steps, wait=args.wait,
                    stall_timeout=args.stall_timeout, exchange=exchange_setting(args),
                    **large_batch_settings(args))
    if args.allreduce == "mpi":
        from sync_network_collective import SynchronicNeuralNetwork
        return SynchronicNeuralNetwork(**settings)
    from sync_network import SynchronicNeuralNetwork
    if args.allreduce == "naive":
        from my_naive_allreduce import allgather, allreduce
        return SynchronicNeuralNetwork(**settings, allreduce=allreduce, allgather=allgather)
    return SynchronicNeuralNetwork(**settings)


def choose_seed(args, comm):
    """The run's seed: the user's, else a fresh one drawn on rank 0 and shared with every rank."""
    seed = args.seed if args.seed is not None else secrets.randbits(32)
    return comm.bcast(seed, root=0) if comm is not None else seed


def resumed_network(args, seed):
    """The network of build_network, continuing from --resume if given."""
    network = build_network(args, seed)
    if args.resume:
        network.load_checkpoint(args.resume)
    return network


def agree_on_setup(comm, setup):
    """Run `setup()` on every rank; if it fails on any with bad input, rank 0 reports and all exit 2.

    Every rank must learn of a failure elsewhere, or the healthy ranks would wait forever.
    """
    try:
        result, problem = setup(), None
    except (DataError, ValueError) as error:
        result, problem = None, str(error)
    problems = comm.allgather(problem) if comm is not None else [problem]
    failed = [(rank, text) for rank, text in enumerate(problems) if text is not None]
    if failed:
        rank, text = failed[0]
        if comm is None or comm.rank == 0:
            where = f" (on rank {rank})" if len(failed) < len(problems) else ""
            print(f"main.py: error{where}: {text}", file=sys.stderr, flush=True)
        sys.exit(INPUT_ERROR_EXIT)
    return result


def train(args, comm):
    """Load the data, build the network, train it, report; rank 0 prints and writes the files."""
    seed = choose_seed(args, comm)
    # Data first: a rank that cannot read it must not be missing from the collectives that
    # building a distributed network performs.
    data = agree_on_setup(comm, lambda: load_mnist(args.data_dir))
    network = agree_on_setup(comm, lambda: resumed_network(args, seed))
    training_data, validation_data, test_data = data
    if args.trace:
        network.trace_into(Tracer())
    if args.checkpoint:
        signal.signal(signal.SIGTERM, lambda signum, frame: setattr(network, "stop_requested", True))
    start, cores_before = time.perf_counter(), core_times()
    network.fit(training_data, validation_data, checkpoint=args.checkpoint)
    elapsed = time.perf_counter() - start
    cores = [None if b is None or a is None else a - b for a, b in zip(core_times(), cores_before)]
    if args.trace:
        network.tracer.write(args.trace, comm, network.track_name())
    memory = comm.gather(peak_rss_mb(), root=0) if comm is not None else [peak_rss_mb()]
    cores = comm.gather(cores, root=0) if comm is not None else [cores]
    finished = network.epoch >= network.epochs  # the same on every rank
    correct = network.evaluate(test_data) if finished else None  # sync: every rank takes a share
    if not network.is_root:
        return
    if not finished:
        print(f"Stopped on SIGTERM after epoch {network.epoch} of {network.epochs}; "
              f"resume with --resume {args.checkpoint}", flush=True)
        return
    accuracy = 100.0 * correct / len(test_data[0])
    print(f"Time {args.mode}: {elapsed:.2f}")
    print(f"Test Accuracy: {accuracy:.2f}%", flush=True)
    if args.save:
        np.savez(args.save, params=network.params, sizes=np.array(network.sizes))
    if args.json:
        answers = np.bincount(network.predict(test_data[0]), minlength=network.sizes[-1])
        measured = {"cpu_time_per_rank": [c[0] for c in cores], "core_wait_per_rank": [c[1] for c in cores],
                    "core_turns_per_rank": [c[2] for c in cores],
                    "top_class": int(answers.argmax()), "top_class_share": float(answers.max() / answers.sum())}
        write_record(args, network, seed, comm, elapsed, accuracy, memory, measured)


def core_times():
    """(seconds this process has run on a core, seconds it has waited, runnable, for one, turns on a core): its
    CPU time, and from the kernel's /proc/self/schedstat the wait and how many times it was put on a core (None
    elsewhere). Ranks sharing too few cores show in all three. The CPU time is not schedstat's: the kernel brings
    that up to date only at a tick or a switch, so a short fit read 0."""
    try:
        with open("/proc/self/schedstat") as f:
            fields = f.read().split()
        waited, turns = int(fields[1]) / 1e9, int(fields[2])
    except (OSError, ValueError, IndexError):
        waited = turns = None
    return time.process_time(), waited, turns


def departures(args, network):
    """The settings of the run that depart from the course's algorithm, {name: value}; {} for the course's.

    The course's: serial and sync plain SGD on the summed gradient of each mini-batch, sync split
    over the ranks (strong scaling) and exchanging the gradients; async as async_network.COURSE_ALGORITHM.
    Which allreduce sums the gradients (ring, naive, MPI's) is each the course's own.
    """
    if args.mode == "async":
        return network.departures()
    found = {}
    if args.mode == "sync":
        if network.scaling != "strong":
            found["scaling"] = network.scaling
        if network.exchange != "gradients":
            found["exchange"] = network.exchange
    if not network.rule.is_plain():
        found["large_batch"] = network.rule.record()
    return found


def run_settings(args, network):
    """The record's settings: the command line's, async's pipeline as it resolved ("auto" -> 0 or 1)."""
    settings = {key: value for key, value in vars(args).items()
                if key not in ("save", "json", "checkpoint", "resume", "trace")}
    if args.mode == "async":
        settings["pipeline"] = network.pipeline
    return settings


def write_record(args, network, seed, comm, elapsed, accuracy, memory, measured):
    """Write the --json record of the run; `measured`: its fields beside the statistics (each rank's
    time on a core and waiting for one during fit, the share of test images given the most frequent answer)."""
    departed = departures(args, network)
    record = {
        "mode": args.mode,
        "processes": comm.size if comm is not None else 1,
        "settings": run_settings(args, network),
        "course_algorithm": not departed,
        "departures": departed,
        "resumed_from": args.resume,
        "seed": seed,
        "epoch_accuracy": network.history,
        "time": elapsed,
        "test_accuracy": accuracy,
        "peak_rss_mb": max(memory),
        "peak_rss_mb_per_rank": memory,
        "statistics": network.statistics() if hasattr(network, "statistics") else {},
        **measured,
    }
    with open(args.json, "w") as f:
        json.dump(record, f, indent=2)


def main(argv=None):
    """Entry point: parse, start MPI for the distributed modes, train; any error ends every rank."""
    args = parse_args(argv)
    comm = None
    if args.mode != "serial":
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    try:
        train(args, comm)
    except Exception as error:  # noqa: BLE001 - any failure must end the whole job, not hang it
        rank = comm.rank if comm is not None else 0
        print(f"main.py: error on rank {rank}: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        if comm is not None and comm.size > 1:
            # The launcher forwards our stderr asynchronously, and the abort kills its forwarders:
            # a moment's grace, or the one line that says what happened can be lost (seen once in CI).
            time.sleep(ABORT_GRACE)
            comm.Abort(FAILURE_EXIT)
        sys.exit(FAILURE_EXIT)


if __name__ == "__main__":
    main()
