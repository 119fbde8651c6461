"""A pytest plugin: where the test suite's time goes -- JAX's tracing, lowering and XLA's
compile, in all and per test -- from JAX's own ``/jax/core/compile/*`` duration events.

Usage (the shares in ``benchmarks/notes/compile.md``, "The test suite's compile time")::

    make test PYTEST_PARALLEL="-n 2 --dist worksteal -p suite_compile_stats" \\
        PYTHONPATH=benchmarks

At the end of the session it prints the seconds and counts of each phase summed over the
workers (pytest-xdist's workers send theirs to the controller) and the tests that
compiled the longest; with ``SUITE_COMPILE_STATS_JSON=path`` it also writes every test's
seconds of each phase there (a JSON object: test id -> phase -> seconds; each pytest
process writes its own, so give `make test`'s three processes the file in turn, or run
pytest alone).
"""

from __future__ import annotations

import collections
import json
import os

from jax import monitoring

PHASES = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}
SHOWN = 15

seconds: collections.Counter = collections.Counter()
counts: collections.Counter = collections.Counter()
per_test: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
_running = ["(outside tests)"]


def _on_duration(event: str, duration: float, **_: object) -> None:
    phase = PHASES.get(event)
    if phase:
        seconds[phase] += duration
        counts[phase] += 1
        per_test[_running[0]][phase] += duration


monitoring.register_event_duration_secs_listener(_on_duration)


def pytest_runtest_setup(item) -> None:
    _running[0] = item.nodeid


def pytest_sessionfinish(session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the sums to the controller
        workeroutput["compile_stats"] = json.dumps([seconds, counts, per_test])


def pytest_testnodedown(node, error) -> None:
    sent = getattr(node, "workeroutput", {}).get("compile_stats")
    if sent:
        worker_seconds, worker_counts, worker_tests = json.loads(sent)
        seconds.update(worker_seconds)
        counts.update(worker_counts)
        for test, phases in worker_tests.items():
            per_test[test].update(phases)


def pytest_terminal_summary(terminalreporter) -> None:
    if not counts:
        return
    if path := os.environ.get("SUITE_COMPILE_STATS_JSON"):
        with open(path, "w") as file:
            json.dump(per_test, file)
    write = terminalreporter.write_line
    terminalreporter.section("JAX: trace, lower, compile")
    for phase in PHASES.values():
        write(f"{phase:>8}: {seconds[phase]:8.1f} s, {counts[phase]:6d} programs")
    write(f"tests that compiled longest (s: {', '.join(PHASES.values())}):")
    slowest = sorted(per_test.items(), key=lambda item: -item[1]["compile"])[:SHOWN]
    for test, phases in slowest:
        write("  " + " ".join(f"{phases[p]:6.1f}" for p in PHASES.values()) + f"  {test}")
