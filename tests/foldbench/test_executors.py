"""Where the replay jobs run: local processes or a dask.distributed cluster.

The records must be the same whichever executor ran them, a worker lost mid-sweep
must have its jobs run again with each result taken once, and the CLI must say where
the runs go and how the workers share them.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from context_manager.cli import app, load_plugins
from foldbench import benchmark, dataset, executors
from foldbench.executors import DaskExecutor, LocalExecutor, WorkerLoad, make_executor

load_plugins()

TRAJ = dataset("swe-agent") / "marshmallow-1867-function-calling.traj"
POLICIES = ["ours:kv-stable", "observation-masking", "langchain-summarization-middleware"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[DaskExecutor]:
    """A local cluster of two worker processes, shared by this module's tests."""
    with DaskExecutor(workers=2) as running:
        yield running


def test_local_executor_keeps_the_jobs_order_in_this_process_and_in_processes() -> None:
    jobs = list(range(-6, 7))
    seen: list[tuple[int, int]] = []
    assert LocalExecutor(1).map(abs, jobs, progress=lambda d, t: seen.append((d, t))) == [
        abs(j) for j in jobs
    ]
    assert seen == [(k, len(jobs)) for k in range(1, len(jobs) + 1)]
    with LocalExecutor(2) as pool:
        assert pool.map(abs, jobs) == [abs(j) for j in jobs]
        assert pool.load() == {}


def test_make_executor_refuses_unknown_names_and_a_scheduler_without_dask() -> None:
    with pytest.raises(ValueError, match="unknown executor 'ray'; choose one of local, dask"):
        make_executor("ray")
    with pytest.raises(ValueError, match="use it with --executor dask"):
        make_executor("local", scheduler="tcp://127.0.0.1:8786")
    with pytest.raises(ValueError, match="workers must be at least 1"):
        LocalExecutor(0)


def test_an_unreachable_scheduler_is_refused_saying_how_to_start_one() -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(executors.ExecutorError, match="cannot reach the dask scheduler") as e:
        DaskExecutor(f"tcp://127.0.0.1:{port}", timeout=1)
    assert "dask scheduler" in str(e.value) and "--scheduler out" in str(e.value)


def test_a_sweep_on_dask_gives_the_records_of_the_serial_run(cluster: DaskExecutor) -> None:
    transcripts = benchmark.quick_transcripts()[:2]
    serial = benchmark.run(transcripts, POLICIES, [3000, 6000], workers=1)
    seen: list[int] = []
    spread = benchmark.run(
        transcripts, POLICIES, [3000, 6000], executor=cluster, progress=lambda d, t: seen.append(d)
    )
    assert spread.records and len(spread.records) == len(serial.records)
    assert executors.records_digest(spread.records) == executors.records_digest(serial.records)
    assert seen == list(range(1, 2 * 3 * 2 + 1))
    load = cluster.load()
    assert sum(x.done for x in load.values()) == 12 and all(x.running == 0 for x in load.values())
    assert set(load) <= set(cluster.workers())


def test_the_digest_ignores_only_the_measured_fields() -> None:
    records = benchmark.run(benchmark.quick_transcripts()[:1], ["observation-masking"], [4000])
    rs = records.records
    import dataclasses

    timed = [dataclasses.replace(r, cpu_ms=r.cpu_ms + 7.0) for r in rs]
    assert executors.records_digest(timed) == executors.records_digest(rs)
    changed = [dataclasses.replace(rs[0], tokens=rs[0].tokens + 1), *rs[1:]]
    assert executors.records_digest(changed) != executors.records_digest(rs)
    assert executors.records_digest(rs[::-1]) != executors.records_digest(rs)


def test_a_worker_killed_mid_sweep_has_its_job_run_again_and_counted_once(
    tmp_path: Path,
) -> None:
    """Job 0 blocks on its worker until that worker is killed with SIGKILL; the
    scheduler runs it again on another, and its result is taken once."""
    journal = tmp_path / "runs"
    journal.mkdir()

    def job(k: int) -> int:  # a closure: shipped to the workers by value
        from distributed import Event

        with open(journal / f"{k}-{os.getpid()}", "w", encoding="utf-8"):
            pass
        if k == 0 and not Event("rerun").is_set():
            Event("rerun").wait(timeout=120)  # until the test kills this worker
        return k * k

    with DaskExecutor(workers=2) as running:
        from distributed import Event

        killed: list[str] = []

        def kill_the_worker_of_job_0(done: int, total: int) -> None:
            if killed:
                return
            holder = [w for w, keys in running.client.processing().items() if "replay-0" in keys]
            if not holder:
                return  # job 0 not yet started: wait for the next result
            pid = running.client.run(os.getpid, workers=holder)[holder[0]]
            os.kill(pid, signal.SIGKILL)
            killed.append(holder[0])
            Event("rerun", client=running.client).set()

        results = running.map(job, list(range(8)), progress=kill_the_worker_of_job_0)
        assert killed, "job 0 was never seen running"
        assert running.lost_workers >= 1
    assert results == [k * k for k in range(8)]  # each once, in order
    runs = sorted(p.name.split("-")[0] for p in journal.iterdir())
    assert runs.count("0") == 2  # started on the killed worker, run again elsewhere
    assert all(runs.count(str(k)) >= 1 for k in range(1, 8))


def test_describe_load_is_done_plus_running_per_worker() -> None:
    assert executors.describe_load({}) == ""
    one = {"tcp://127.0.0.1:1": WorkerLoad(3, 1)}
    assert executors.describe_load(one) == "1 worker (done+running): 3+1"


def _digest(result: Any, out: Path) -> str:
    assert result.exit_code == 0, result.output
    loaded = benchmark.BenchmarkReport.from_json((out / "records.json").read_text())
    digest = executors.records_digest(loaded.records)
    assert f"records digest {digest[:16]}" in result.output.replace("\n", "")
    return digest


def test_cli_replay_on_dask_writes_the_records_of_the_local_run(tmp_path: Path) -> None:
    runner = CliRunner()
    common = ["replay", str(TRAJ), "-p", "ours:kv-stable", "-p", "observation-masking"]
    common += ["-b", "3000", "-b", "6000"]
    local = runner.invoke(app, [*common, "--out", str(tmp_path / "l"), "--workers", "1"])
    assert "on local, in this process" in local.output
    args = [*common, "--out", str(tmp_path / "d"), "--executor", "dask", "--workers", "2"]
    spread = runner.invoke(app, args)
    assert "4 runs (1 transcripts x 2 policies x 2 budgets) on dask, local cluster, 2 workers" in (
        spread.output.replace("\n", " ")
    )
    assert "replaying: 4/4 runs (100%)" in spread.output
    assert "(done+running)" in spread.output  # the per-worker load on the progress line
    assert _digest(spread, tmp_path / "d") == _digest(local, tmp_path / "l")


def test_cli_sweep_on_dask_prints_every_solver(tmp_path: Path) -> None:
    args = ["sweep", "-m", "oldest-first", "-m", "flat-profile", "--executor", "dask"]
    result = CliRunner().invoke(app, [*args, "--workers", "2"])
    assert result.exit_code == 0, result.output
    assert "2 solvers on dask, local cluster, 2 workers" in result.output
    assert "oldest-first" in result.output and "flat-profile" in result.output
    refused = CliRunner().invoke(app, ["sweep", "-m", "nope", "--executor", "dask"])
    assert refused.exit_code != 0 and "unknown solver 'nope'" in refused.output
