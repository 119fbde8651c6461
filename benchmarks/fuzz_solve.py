"""A differential fuzzer for jaxdia's solve side, against NumPy, SciPy and JAX's dense
Jacobians.

Families (``--family``), each a module ``benchmarks/fuzz/<family>.py`` whose docstring
says what it checks: ``banded`` (banded LU and Cholesky solves, every api and
implementation), ``periodic`` (bands plus corner diagonals), ``ilu`` (ILU(0)/IC(0) on
stencils), ``multigrid`` (multigrid-preconditioned ``cg``/``bicgstab``), ``jacobian``
(``jacobian``/``value_and_jacobian`` against ``jax.jacfwd``), ``sharded`` (products and
solves on 2-8 fake CPU devices), then those listed in ``MODULE_FAMILIES`` (``ivp``,
``gmres``, ``lstsq``, ``logdet``, ``expm``: ``expm_multiply``, ``eigsh``); their shared
core is ``benchmarks/fuzz/core.py``.

Each case is drawn from ``numpy.random.default_rng([seed, family, index])`` and is
described by a JSON dict of parameters; its verdict is

* ``PASS``: accurate to a condition-aware tolerance (the normwise backward error of a
  solve, the residual a solver reports, the entries of a factor or a Jacobian);
* ``FLAGGED``: the API reported failure (``info != 0``, ``ok`` false, a NaN solution,
  ``converged`` false, or a ``ValueError``/``TypeError``/``LinAlgError``); tagged
  ``unexpected`` where the case is well posed and well conditioned;
* ``FAIL``: a wrong answer reported as a success, a crash, a hang (each case runs in a
  worker process under a timeout) or an exception of an unclear type.

Every FAIL prints a one-line reproducer. Not run by the tests: ``tests/test_fuzz.py``
runs a fixed slice of it.

    PYTHONPATH=. .venv/bin/python benchmarks/fuzz_solve.py --cases 200 --seed 0 \\
        --family all|<one of the families above> [--quick]
    PYTHONPATH=. .venv/bin/python benchmarks/fuzz_solve.py --family banded --seed 0 \\
        --index 17             # one case again, in this process, with its details
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import math
import os
import select
import subprocess
import sys
import tempfile
import time
import warnings
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# this checkout's jaxdia (not an installed one), and benchmarks/fuzz/ as the package `fuzz`
for _path in (ROOT, ROOT / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from fuzz.core import FAIL, FLAGGED, PASS, Case, Result, raised  # noqa: E402

#: The families, each a module ``benchmarks/fuzz/<family>.py`` (see ``fuzz/core.py``): the
#: first ones, whose position seeds their cases, then those added since, whose name does
#: (:func:`family_seed`: adding a family changes no other's cases).
BUILTIN_FAMILIES = ("banded", "periodic", "ilu", "multigrid", "jacobian", "sharded")
MODULE_FAMILIES: tuple[str, ...] = ("ivp", "gmres", "lstsq", "logdet", "expm", "eigsh")
FAMILIES = BUILTIN_FAMILIES + MODULE_FAMILIES
#: Seconds a case may take (compilation included) before its worker is killed, unless its
#: module sets ``TIMEOUT``.
DEFAULT_TIMEOUT = 60.0


# -- cases ------------------------------------------------------------------------------------


def family_seed(family: str) -> int:
    """The number that seeds ``family``'s cases beside the run's seed: a first family's
    position, a later family's name."""
    if family in BUILTIN_FAMILIES:
        return BUILTIN_FAMILIES.index(family)
    return zlib.crc32(family.encode())


def generate(family: str, seed: int, index: int) -> Case:
    """Case ``index`` of ``family`` for ``seed`` (reproducible)."""
    rng = np.random.default_rng([seed, family_seed(family), index])
    params = GENERATORS[family](rng, seed)
    params["values"] = int(rng.integers(2**31))
    return Case(family, seed, index, params)


def run_case(case: Case) -> Result:
    """Runs one case in this process and classifies it (never raises)."""
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = CHECKS[case.family](case.params)
    except Exception as error:  # an unclear library error, or the harness's own bug
        result = raised(error, unexpected=True)
    result.seconds = time.perf_counter() - start
    return result


#: Each family's case generator, check and timeout, from its module (``fuzz.<family>``).
GENERATORS: dict[str, Callable[[np.random.Generator, int], dict]] = {}
CHECKS: dict[str, Callable[[dict], Result]] = {}
TIMEOUTS: dict[str, float] = {}
for _family in FAMILIES:
    _module = importlib.import_module(f"fuzz.{_family}")
    GENERATORS[_family], CHECKS[_family] = _module.generate, _module.check
    TIMEOUTS[_family] = getattr(_module, "TIMEOUT", DEFAULT_TIMEOUT)


# -- running cases in a worker process, under timeouts -----------------------------------------

_MARK = "@@fuzz-result "


def _worker() -> None:
    """Reads cases (JSON lines) on stdin, writes their results on stdout."""
    if os.environ.get("FUZZ_OPTIMIZED") != "1":
        # compile as the test suite does: XLA's optimizations cost more than they save here
        jax.config.update("jax_disable_most_optimizations", True)
    # Results go to the original stdout; anything else written to fd 1 (Python or C++)
    # goes to stderr, so that it cannot mix with them.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        spec = json.loads(line)
        case = Case(spec["family"], spec["seed"], spec["index"], spec["params"])
        result = run_case(case)
        out.write(_MARK + json.dumps(dataclasses.asdict(result)) + "\n")
        out.flush()


class Worker:
    """A worker process for one family (the sharded one gets 8 fake CPU devices)."""

    def __init__(self, family: str):
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        if family == "sharded":
            env["XLA_FLAGS"] = (
                env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
            ).strip()
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed by close())
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.buffer = b""

    def run(self, case: Case, timeout: float) -> Result:
        spec = {
            "family": case.family,
            "seed": case.seed,
            "index": case.index,
            "params": case.params,
        }
        assert self.process.stdin is not None and self.process.stdout is not None
        start = time.perf_counter()
        try:
            self.process.stdin.write(json.dumps(spec) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            return Result(FAIL, f"worker died before the case: {self.tail()}")
        fd = self.process.stdout.fileno()
        while True:
            left = timeout - (time.perf_counter() - start)
            if left <= 0:
                self.kill()
                return Result(
                    FAIL, f"timeout: no result after {timeout:.0f} s (hang?)", seconds=timeout
                )
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                code = self.process.wait()
                return Result(
                    FAIL,
                    f"worker crashed (exit code {code}): {self.tail()}",
                    seconds=time.perf_counter() - start,
                )
            self.buffer += chunk
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                text = line.decode(errors="replace")
                if text.startswith(_MARK):
                    return Result(**json.loads(text[len(_MARK) :]))

    def tail(self) -> str:
        self.log.seek(0)
        return " | ".join(self.log.read().strip().splitlines()[-3:])[-400:]

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.alive():
            os.killpg(self.process.pid, 9)  # the worker's own process group
            self.process.wait()

    def close(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        if self.alive():
            try:
                self.process.stdin.close()
                self.process.wait(timeout=30)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.kill()
        for stream in (self.process.stdin, self.process.stdout, self.log):
            with contextlib.suppress(BrokenPipeError):
                stream.close()


def run_isolated(cases: list[Case], timeout_scale: float = 1.0, progress=None):
    """Runs ``cases`` in worker processes (one per family, restarted after a crash or a
    timeout); yields ``(case, result)`` in the order run: by family, then in blocks of
    100 indices, within a block by banded implementation (switching it drops JAX's
    caches), then by index (so that a run cut short by a time budget still samples every
    implementation)."""
    order = sorted(
        cases,
        key=lambda c: (
            FAMILIES.index(c.family),
            c.index // 100,
            str(c.params.get("method")),
            c.index,
        ),
    )
    worker, family = None, None
    try:
        for case in order:
            if worker is None or family != case.family or not worker.alive():
                if worker is not None:
                    worker.close()
                worker, family = Worker(case.family), case.family
            timeout = TIMEOUTS.get(case.family, DEFAULT_TIMEOUT) * timeout_scale
            result = worker.run(case, timeout)
            if progress is not None:
                progress(case, result)
            yield case, result
    finally:
        if worker is not None:
            worker.close()


# -- the command line -------------------------------------------------------------------------


def summarize(results: list[tuple[Case, Result]], elapsed: float) -> str:
    lines = [
        f"{'family':<10} {'cases':>6} {'PASS':>6} {'FLAGGED':>8} {'(unexp.)':>9} "
        f"{'FAIL':>5} {'max err/tol':>12} {'seconds':>8}"
    ]
    for family in FAMILIES:
        mine = [(c, r) for c, r in results if c.family == family]
        if not mine:
            continue
        counts = Counter(r.verdict for _, r in mine)
        unexpected = sum(r.unexpected for _, r in mine)
        worst = max((r.ratio for _, r in mine if r.verdict == PASS), default=0.0)
        seconds = sum(r.seconds for _, r in mine)
        lines.append(
            f"{family:<10} {len(mine):>6} {counts[PASS]:>6} {counts[FLAGGED]:>8} "
            f"{unexpected:>9} {counts[FAIL]:>5} {worst:>12.3f} {seconds:>8.0f}"
        )
    lines.append(f"total {len(results)} cases in {elapsed:.0f} s")
    fails = [(c, r) for c, r in results if r.verdict == FAIL]
    if fails:
        lines.append(f"\nFAIL ({len(fails)}):")
        for c, r in sorted(fails, key=lambda cr: (cr[0].family, cr[0].index)):
            lines.append(f"  [{c.family} #{c.index}] {r.detail}\n    {c.reproducer()}")
    odd = [(c, r) for c, r in results if r.unexpected]
    if odd:
        lines.append(f"\nFLAGGED on a well-posed case ({len(odd)}):")
        for c, r in sorted(odd, key=lambda cr: (cr[0].family, cr[0].index)):
            lines.append(f"  [{c.family} #{c.index}] {r.detail}\n    {c.reproducer()}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="all", choices=("all", *FAMILIES))
    parser.add_argument("--cases", type=int, default=200, help="cases per family")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="20 cases per family")
    parser.add_argument("--start", type=int, default=0, help="first case index")
    parser.add_argument("--index", type=int, help="run this one case here, in this process")
    parser.add_argument("--params", help="run a case with these JSON params, in this process")
    parser.add_argument(
        "--budget",
        type=float,
        default=math.inf,
        help="seconds per family: no new case starts after that",
    )
    parser.add_argument("--timeout-scale", type=float, default=1.0)
    parser.add_argument("--json", help="write every case and its result to this file")
    parser.add_argument(
        "--isolate",
        action="store_true",
        help="with --index/--params: run the case in a worker, under its timeout",
    )
    parser.add_argument("--verbose", action="store_true", help="print every case's verdict")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker()
        return 0
    families = FAMILIES if args.family == "all" else (args.family,)
    if args.index is not None or args.params:
        family = families[0] if args.family != "all" else "banded"
        if family == "sharded" and not args.isolate:  # before JAX starts its backend
            os.environ["XLA_FLAGS"] = (
                os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
            ).strip()
        case = generate(family, args.seed, args.index or 0)
        if args.params:
            case.params = json.loads(args.params)
        print(case.reproducer())
        if args.isolate:
            result = list(run_isolated([case], args.timeout_scale))[0][1]
        else:
            result = run_case(case)
        print(
            f"{result.verdict}: {result.detail} (err/tol {result.ratio:.3g}, "
            f"{result.seconds:.1f} s)"
        )
        return int(result.verdict == FAIL)
    count = 20 if args.quick else args.cases
    results: list[tuple[Case, Result]] = []
    start = time.perf_counter()
    for family in families:
        began = time.perf_counter()
        cases = [generate(family, args.seed, i) for i in range(args.start, args.start + count)]

        def progress(case, result):
            if args.verbose:
                print(
                    f"{result.verdict:8} {result.seconds:6.1f}s [{case.family} #{case.index}] "
                    f"{result.detail[:150]}",
                    flush=True,
                )
            elif result.verdict == FAIL:
                print(
                    f"FAIL [{case.family} #{case.index}] {result.detail}\n  {case.reproducer()}",
                    flush=True,
                )

        done = 0
        for case, result in run_isolated(cases, args.timeout_scale, progress):
            results.append((case, result))
            done += 1
            if time.perf_counter() - began > args.budget:
                print(f"[{family}: budget spent after {done} cases]", flush=True)
                break
        print(f"[{family}: {done} cases in {time.perf_counter() - began:.0f} s]", flush=True)
    print()
    print(summarize(results, time.perf_counter() - start))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(
                [
                    {"case": dataclasses.asdict(c), "result": dataclasses.asdict(r)}
                    for c, r in results
                ],
                file,
                indent=1,
            )
    return int(any(r.verdict == FAIL for _, r in results))


if __name__ == "__main__":
    sys.exit(main())
