"""Property-based fuzzing: the test suite's kernels, mutated as a careless or hostile user
would (tokens swapped, numbers made huge, indices dropped, unsupported constructs put in:
tests/fuzz_mutations.py), either run with the same results on the cpu and debug targets
or are refused with a TesseraError that names the kernel — a compile error pointing into
the mutated file. Never another exception, a crash or a hang.

Each mutant is written to a file (kernels are compiled from their source) and judged by
a worker process (tests/fuzz_worker.py), so a crash or a hang is seen as one. Hypothesis
draws the mutations with a fixed seed (``derandomize``); a failure prints the mutant.
"""

from __future__ import annotations

import itertools
import textwrap
import warnings

import fuzz_mutations as fm
import pytest
from fuzz_worker import WorkerProcess
from hypothesis import HealthCheck, event, given, reject, settings
from hypothesis import strategies as st

ANSWER_SECONDS = 60  # a worker silent this long hangs (a mutant's compile takes ~1 s)
EXAMPLES = 150  # about 50 s on a loaded 2-core machine
_names = itertools.count()


@pytest.fixture(scope="module")
def worker():
    process = WorkerProcess(ANSWER_SECONDS)
    yield process
    process.close()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("mutants")


def judge(worker: WorkerProcess, folder, name: str, text: str) -> dict:
    path = folder / f"mutant{next(_names)}.py"
    path.write_text(text)
    answer = worker.ask(str(path), name)
    answer["report"] = f"{answer['what']}\n{answer.get('detail', '')}\n--- {path}:\n{text}"
    return answer


def draw_mutant(data) -> tuple[str, str]:
    """A seed kernel's name and the text of its module after one or two mutations."""
    seed = data.draw(st.sampled_from(fm.seeds()), label="seed")
    tree = seed.tree()

    def choose(label: str, options) -> object:
        return data.draw(st.sampled_from(list(options)), label=label)

    for _ in range(data.draw(st.integers(1, 2), label="mutations")):
        fm.mutate(tree, choose("kind", fm.KINDS), choose)
    try:
        text = fm.module_text(tree)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)  # "is" with a literal, ...
            compile(text, "<mutant>", "exec")
    except (SyntaxError, ValueError, RecursionError):
        reject()  # not Python: Python refuses it before Tessera sees it
    return seed.name, text


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)
@given(data=st.data())
def test_a_mutated_kernel_runs_the_same_on_cpu_and_debug_or_is_a_tessera_error(
    worker, folder, data
):
    name, text = draw_mutant(data)
    answer = judge(worker, folder, name, text)
    event(answer["what"].split(":")[0])
    assert answer["verdict"] == "ok", answer["report"]


def test_there_are_seed_kernels_flat_and_grouped():
    sources = [s.source for s in fm.seeds()]
    assert len(sources) >= 40
    assert any("@kernel(tile=" in s for s in sources) and any("@kernel\n" in s for s in sources)


@pytest.mark.parametrize("name", ["scale", "group_sum", "transpose", "compact"])
def test_the_worker_runs_an_unmutated_seed_on_both_targets(worker, folder, name):
    seed = next(s for s in fm.seeds() if s.name == name)
    answer = judge(worker, folder, name, fm.module_text(seed.tree()))
    assert answer["what"] == "ran: cpu == debug", answer["report"]


def planted(bug: str) -> str:
    """A module that plants ``bug`` in the compiler of the worker that imports it, then
    declares kernel ``k`` and launches nothing (the worker does)."""
    return fm.PRELUDE + textwrap.dedent(
        f"""
        from tessera.kernel import frontend, launch

        # compiled apart, so the exception comes from outside the mutated file
        exec(compile("def _planted(*args):\\n    raise KeyError('planted')", "<bug>", "exec"))

        {bug} = _planted

        @kernel
        def k(x: f32[n], y: mut[f32[n]]):
            y[0] = x[0]
        """
    )


@pytest.mark.parametrize(
    "bug",
    [
        "frontend.Frontend.array_ref",  # an InternalError, at decoration
        "launch.Binder.fast",  # a raw KeyError, at the launch
    ],
)
def test_the_worker_reports_a_bug_in_tessera_as_a_violation(folder, bug):
    process = WorkerProcess(ANSWER_SECONDS)  # a worker of its own: the bug stays there
    try:
        answer = judge(process, folder, "k", planted(bug))
    finally:
        process.close()
    assert answer["verdict"] == "violation" and "planted" in answer["what"], answer["report"]


def test_the_worker_reports_a_crash_as_a_violation(folder):
    process = WorkerProcess(ANSWER_SECONDS)
    try:
        answer = judge(process, folder, "k", "import os\nos._exit(3)\n")
    finally:
        process.close()
    assert answer["verdict"] == "violation" and "crash" in answer["what"]


def test_the_worker_reports_a_hang_as_a_violation(folder):
    process = WorkerProcess(2)
    try:
        answer = judge(process, folder, "k", "while True:\n    pass\n")
    finally:
        process.close()
    assert answer["verdict"] == "violation" and "hang" in answer["what"]
