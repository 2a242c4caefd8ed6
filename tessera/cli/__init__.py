"""The ``tessera`` command: ``info``, ``demo``, ``cache list|clear``, ``tune SCRIPT``,
``run`` (tessera.runtime.runner), ``bench``, ``pack-repro``, ``replay``, ``trace merge`` and
``metrics summary``."""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import platform
import runpy
import subprocess
import sys
from pathlib import Path

from ..aot import command as aot_command
from ..autotune import store
from ..autotune.tuner import collecting_sweeps
from ..config import CONFIG_ENV, refresh, report
from ..errors import TesseraError
from ..kernel import disk_cache
from ..kernel.targets import TARGETS
from ..mesh import Mesh, link_store, topology
from ..observe import plots, repro
from ..observe.metrics import summary as metrics_table
from ..observe.session import stand_down
from ..observe.trace import merge as merge_traces
from ..runtime import launchers, runner, threads
from ..runtime.world import find_mpiexec, world
from ..version import __version__
from . import demo


def info(out=print) -> None:
    """Versions, threads and which targets this machine can use."""
    import llvmlite
    import numba
    import numpy

    out(f"tessera   {__version__}")
    out(f"python    {platform.python_version()} ({sys.executable})")
    out(f"numba     {numba.__version__}")
    out(f"llvmlite  {llvmlite.__version__}")
    out(f"numpy     {numpy.__version__}")
    out(
        f"cpu       {platform.machine()}, {os.cpu_count()} cores, "
        f"{numba.get_num_threads()} Numba threads ({numba.config.THREADING_LAYER} layer)"
    )
    launch = launchers.detect()
    out(f"threads   {threads.describe()}; TESSERA_THREADS=N sets it")
    out(f"launcher  {launch.describe() if launch else 'none (a world of one process)'}")
    out("targets:")
    for target in TARGETS.values():
        for what, state in target.availability():
            out(f"  {what:<15}{state}")
    mpi = importlib.util.find_spec("mpi4py") is not None
    mpiexec = find_mpiexec()
    out(
        f"mpi       mpi4py {'installed' if mpi else 'not installed'}; "
        f"mpiexec {'at ' + mpiexec if mpiexec else 'not found'}"
    )
    policy = os.environ.get(CONFIG_ENV)
    out(f"settings  (from {CONFIG_ENV}={policy} and the environment)" if policy else "settings:")
    rows = report()
    width = max(len(name) for name, _, _ in rows)
    for name, value, source in rows:
        out(f"  {name:<{width}}  {value or '(empty)':<12}  {source}")


def info_json() -> dict:
    """What ``tessera info`` prints, as one JSON document (``tessera info --json``: paste
    it into a bug report)."""
    import llvmlite
    import numba
    import numpy

    launch = launchers.detect()
    return {
        "tessera": __version__,
        "python": platform.python_version(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "numba": numba.__version__,
        "llvmlite": llvmlite.__version__,
        "numpy": numpy.__version__,
        "cpu": {
            "machine": platform.machine(),
            "cores": os.cpu_count(),
            "numba_threads": numba.get_num_threads(),
            "threading_layer": numba.config.THREADING_LAYER,
        },
        "threads": threads.describe(),
        "launcher": launch.describe() if launch else None,
        "targets": {
            what.strip(): state
            for target in TARGETS.values()
            for what, state in target.availability()
        },
        "mpi": {
            "mpi4py": importlib.util.find_spec("mpi4py") is not None,
            "mpiexec": find_mpiexec(),
        },
        "config_file": os.environ.get(CONFIG_ENV),
        "settings": {name: {"value": value, "from": source} for name, value, source in report()},
    }


def cache(action: str, out=print) -> int:
    """``tessera cache list``: the disk cache's entries; ``tessera cache clear``: empty it."""
    root = disk_cache.directory()
    state = "" if disk_cache.enabled() else " (TESSERA_CACHE=off: launches do not use it)"
    if action == "clear":
        files, nbytes = disk_cache.clear(root)
        tuned = store.clear()
        measured = link_store.clear()
        out(
            f"removed {_count(files, 'file')} ({_size(nbytes)}), "
            f"{_count(tuned, 'autotune entry')} and {_count(measured, 'link measurement')} "
            f"from {root}{state}"
        )
        return 0
    found = disk_cache.entries(root)
    out(f"{root}: {_count(len(found), 'entry')}, {_size(sum(e.size for e in found))}{state}")
    if found:
        rows = [("kernel", "target", "variant", "size", "created", "defined at")]
        for e in sorted(found, key=lambda e: (e.kernel, e.created)):
            defined = e.defined if e.ok else f"unusable ({e.problem}): {e.path.name}"
            rows.append((e.kernel, e.backend, e.variant, _size(e.size), e.created, defined))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        for r in rows:
            out("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    tuned = store.entries()
    out(f"autotune: {_count(len(tuned), 'entry')}")
    for e in tuned:
        config = ", ".join(f"{k}={v}" for k, v in e["config"].items()) if e["config"] else ""
        if e["problem"]:
            config = f"unusable ({e['problem']})"
        out(f"  {e['kernel']}  {config}  {e['created']}  {e['path'].name}")
    links = link_store.files()
    out(f"links: {_count(len(links), 'measurement')} (dist.topology(measure=True))")
    return 0


def bench(bench_args: list[str]) -> int:
    """``tessera bench [NAMES] [--quick]``: the benchmarks live in the source tree's bench/
    (not in the installed package), so this runs them from the checkout it finds."""
    for root in (Path.cwd(), Path(__file__).resolve().parent.parent):
        if (root / "bench" / "__main__.py").exists():
            return subprocess.call([sys.executable, "-m", "bench", *bench_args], cwd=root)
    print(
        "tessera bench: no bench/ folder here; run it from a Tessera source checkout",
        file=sys.stderr,
    )
    return 2


def tune(script: str, script_args: list[str], plot: str | None = None) -> int:
    """``tessera tune [--plot OUT.png] SCRIPT [ARGS...]``: run a script, sweeping every
    autotuned launch again (TESSERA_AUTOTUNE=retune) and printing each sweep's table; the
    script's launches choose the sizes, and the new winners replace the cached ones. With
    ``--plot``, the sweeps are also drawn (time per config, the winner marked)."""
    if plot is not None:
        try:
            plots.require("tessera tune --plot")  # before the script, not after its sweeps
        except TesseraError as error:
            print(error, file=sys.stderr)
            return 2
    os.environ["TESSERA_AUTOTUNE_VERBOSE"] = "1"
    os.environ["TESSERA_AUTOTUNE"] = "retune"
    refresh()
    sys.argv = [script, *script_args]
    with collecting_sweeps() as sweeps:
        runpy.run_path(script, run_name="__main__")
    if plot is None:
        return 0
    if not sweeps:
        print("tessera tune: the script made no autotune sweep; nothing to plot", file=sys.stderr)
        return 1
    print(f"plot: {plots.sweeps_plot(sweeps, plot)}", file=sys.stderr)
    return 0


def pack_repro(source: str, output: str, script_args: list[str]) -> int:
    """``tessera pack-repro (CRASH_DIR | SCRIPT) -o repro.zip``."""
    try:
        written = repro.pack(Path(source), Path(output), script_args)
    except TesseraError as error:
        print(f"tessera pack-repro: {error}", file=sys.stderr)
        return 2
    print(f"wrote {written}; replay it with: tessera replay {written}")
    return 0


def trace_merge(paths: list[str], out: str) -> int:
    """``tessera trace merge trace.rank*.json -o trace.json``: one timeline, a track per
    rank."""
    missing = [p for p in paths if not Path(p).is_file()]
    if missing:
        print(f"tessera trace merge: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    count = merge_traces(paths, out)
    print(f"wrote {out}: {_count(count, 'event')} from {_count(len(paths), 'file')}")
    return 0


def metrics_summary(patterns: list[str]) -> int:
    """``tessera metrics summary FILE|GLOB...``: p50/p95 per kernel and collective over
    the records of every file (the ranks' files together)."""
    paths: list[str] = []
    for pattern in patterns:
        found = [pattern] if Path(pattern).is_file() else sorted(glob.glob(pattern))
        if not found:
            print(f"tessera metrics summary: no such file: {pattern}", file=sys.stderr)
            return 2
        paths += [p for p in found if p not in paths]
    print(metrics_table(paths))
    return 0


def replay(pack: str, target: str | None, trust: bool) -> int:
    """``tessera replay PACK``: a pack that is not there is one line, not a traceback."""
    if not Path(pack).exists():
        print(f"tessera replay: no such file: {pack}", file=sys.stderr)
        return 2
    return repro.run(Path(pack), target, trust)


def prune(older_than: str) -> int:
    """``tessera cache prune --older-than 30d``: delete entries not written for that long."""
    seconds = _duration(older_than)
    if seconds is None:
        print(
            f"tessera cache prune: --older-than {older_than}: give a number with a unit, "
            "s, m, h or d (30d, 12h)",
            file=sys.stderr,
        )
        return 2
    root = disk_cache.directory()
    files, nbytes = disk_cache.prune(seconds, root)
    print(f"removed {_count(files, 'file')} ({_size(nbytes)}) older than {older_than} from {root}")
    return 0


def _duration(text: str) -> float | None:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    number, unit = text[:-1], text[-1:].lower()
    if unit not in units or not number.replace(".", "", 1).isdigit():
        return None
    return float(number) * units[unit]


def _count(n: int, noun: str) -> str:
    plural = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return f"{n} {noun if n == 1 else plural}"


def _size(nbytes: int) -> str:
    if nbytes < 1024:
        return f"{nbytes} B"
    if nbytes < 1024**2:
        return f"{nbytes / 1024:.1f} KiB"
    return f"{nbytes / 1024**2:.1f} MiB"


# what ``tessera --help`` says: plain text, no markup or module names (the docstring is
# for readers of this file)
DESCRIPTION = (
    "Tessera's command line: versions and usable targets (info), a demo, the disk cache, "
    "autotune tables (tune), runs on N ranks (run), benchmarks, repro packs (pack-repro, "
    "replay), traces and metrics. 'tessera COMMAND --help' describes each."
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tessera", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"tessera {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    info_parser = sub.add_parser(
        "info", help="versions, threads and usable targets (cpu, debug, cuda)"
    )
    info_parser.add_argument(
        "--json", action="store_true", help="as one JSON document (for bug reports)"
    )
    sub.add_parser("demo", help="run the demo kernels, check them against NumPy, time them")
    cache_parser = sub.add_parser("cache", help="the disk cache of compiled kernels")
    cache_parser.add_argument(
        "action",
        choices=("list", "clear", "prune"),
        help="list the entries, delete them all, or delete those older than --older-than",
    )
    cache_parser.add_argument(
        "--older-than", metavar="AGE", help="with prune: an age such as 30d, 12h or 90m"
    )
    tune_parser = sub.add_parser(
        "tune", help="run a script, printing the table of every autotune sweep it makes"
    )
    tune_parser.add_argument(
        "--plot", metavar="OUT.png", help="also draw every sweep: time per config, the winner"
    )
    tune_parser.add_argument("script", help="a Python script that launches autotuned kernels")
    tune_parser.add_argument("script_args", nargs=argparse.REMAINDER)
    sub.add_parser(  # parsed by tessera.runtime.runner: the launcher's options pass through
        "run", help="run a script on N ranks (srun in a Slurm allocation, else mpiexec)"
    )
    bench_parser = sub.add_parser(
        "bench", help="run the benchmarks (python -m bench) from a source checkout"
    )
    bench_parser.add_argument("bench_args", nargs=argparse.REMAINDER)
    pack_parser = sub.add_parser(
        "pack-repro", help="zip a crash capture (TESSERA_CRASH_DIR) or a script's into a repro"
    )
    pack_parser.add_argument("source", help="a capture, a crash directory or a script to run")
    pack_parser.add_argument("-o", "--output", default="repro.zip", help="the zip to write")
    pack_parser.add_argument("script_args", nargs="*", help="the script's arguments (after --)")
    replay_parser = sub.add_parser(
        "replay",
        help="re-run a repro pack's launch here (RUNS THE PACK'S PYTHON CODE)",
        description="Re-run a repro pack's launch. WARNING: this runs the pack's kernel.py, "
        "which is Python code with your permissions. A pack made on this machine by you is "
        "sealed (an HMAC under the disk cache's key) and replays at once; any other pack is "
        "refused unless you answer yes on a terminal or pass --trust. Read its kernel.py "
        "first. (Running 'python repro.zip' runs the pack's own __main__.py: only for packs you "
        "trust.)",
    )
    replay_parser.add_argument("pack", help="a repro zip (or an unpacked one)")
    replay_parser.add_argument("--target", help="the target to run it on (default: recorded)")
    replay_parser.add_argument(
        "--trust",
        action="store_true",
        help="run a pack that was not made on this machine by you (its code runs as you)",
    )
    trace_parser = sub.add_parser("trace", help="Chrome traces (TESSERA_TRACE)")
    trace_parser.add_argument("action", choices=("merge",), help="join per-rank trace files")
    trace_parser.add_argument("files", nargs="+", help="trace.rank0.json trace.rank1.json ...")
    trace_parser.add_argument("-o", "--output", required=True, help="the merged trace file")
    topo_parser = sub.add_parser(
        "topo", help="the ranks' hosts, devices, NUMA nodes, NICs and links (under tessera run)"
    )
    topo_parser.add_argument("--json", action="store_true", help="as one JSON document")
    aot_command.add_parser(sub)
    metrics_parser = sub.add_parser("metrics", help="metrics files (TESSERA_METRICS)")
    metrics_parser.add_argument("action", choices=("summary",), help="p50/p95 per kernel")
    metrics_parser.add_argument(
        "files", nargs="+", help="metrics files or globs (metrics.rank*.jsonl): merged"
    )
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:
        stand_down()  # the ranks observe themselves; the launcher writes nothing
        return runner.main(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "aot":
        return aot_command.run(args)
    if args.command == "pack-repro":
        return pack_repro(args.source, args.output, args.script_args)
    if args.command == "replay":
        return replay(args.pack, args.target, args.trust)
    if args.command == "trace":
        return trace_merge(args.files, args.output)
    if args.command == "metrics":
        return metrics_summary(args.files)
    if args.command == "bench":
        return bench(args.bench_args)
    if args.command == "topo":
        return topo(args.json)
    if args.command == "tune":
        return tune(args.script, args.script_args, args.plot)
    if args.command == "info":
        if args.json:
            print(json.dumps(info_json(), indent=2, default=str))
        else:
            info()
        return 0
    if args.command == "cache":
        if args.action == "prune":
            if args.older_than is None:
                parser.error("cache prune needs --older-than AGE (30d, 12h)")
            return prune(args.older_than)
        return cache(args.action)
    return 0 if demo.run() else 1


def topo(as_json: bool) -> int:
    """``tessera topo``: every rank describes itself (one all-gather); rank 0 prints."""
    found = topology(Mesh(axes=("world",), shape=(world().Get_size(),)))
    if world().Get_rank() == 0:
        print(found.to_json() if as_json else found)
    return 0


def entry() -> int:
    """The console script: ``main``, with a closed stdout (``tessera cache list | head``)
    ending the command quietly, as it ends ``ls | head``, instead of in a traceback."""
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit; point it at /dev/null so that flush is quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command the pipe ended
    return status
