"""Where a sweep's points run: processes on this machine, or Ray tasks on a Ray cluster.

Both take the same (model, point) tasks, run the same `run_point`, and yield its rows as they finish, in
whatever order; the results depend on the tasks only. Ray is an optional extra (`glowsdk[distributed]`),
imported only by `run_ray`. A task the executor loses (a worker process killed, a node gone) yields a row
whose error starts with `LOST`: such rows are run again by `--resume`, a point's own errors are not.
"""
from __future__ import annotations

import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Callable, Iterator, Sequence

from ..errors import GlowError
from .grid import Point
from .point import PreparedModel, run_point

Task = tuple[PreparedModel, Point]
LOST = "executor lost the task"
"""The start of the error of a row that did not run to its end: `--resume` runs it again."""


def lost_row(model: PreparedModel, point: Point, why: str) -> dict[str, Any]:
    return {"model": model.spec.name, "point": point.key, **point.settings, "status": "error",
            "error": f"{LOST}: {why}"}


def _one_thread() -> None:
    """Workers split the cores between them: a numpy pool per worker would only fight over them."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)


def run_local(tasks: Sequence[Task], workers: int | None, address: str | None = None) -> Iterator[dict[str, Any]]:
    """`workers` processes of this machine (default one per core; with one, the points run in this process,
    in order)."""
    if address is not None:
        raise GlowError("--address: the local executor runs on this machine only (--executor ray joins a cluster)")
    workers = workers or os.cpu_count() or 1
    if workers == 1:
        for model, point in tasks:
            yield run_point(model, point)
        return
    with ProcessPoolExecutor(max_workers=workers, initializer=_one_thread) as pool:
        pending = {pool.submit(run_point, model, point): (model, point) for model, point in tasks}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                model, point = pending.pop(future)
                error = future.exception()
                yield lost_row(model, point, f"{type(error).__name__}: {error}") if error else future.result()


def run_ray(tasks: Sequence[Task], workers: int | None, address: str | None = None) -> Iterator[dict[str, Any]]:
    """Ray tasks, at most `workers` at a time (default: the cluster's CPUs): on a new local Ray cluster
    (of `workers` CPUs, default this machine's), or on the cluster at `address` (whose nodes have glowsdk
    installed)."""
    try:
        import ray
    except ImportError:
        raise GlowError("--executor ray needs Ray: pip install 'glowsdk[distributed]'") from None
    try:
        if address is None:
            # Ray nices its workers (15) to keep a driver responsive; here the workers are the sweep, and at
            # nice 15 on a busy machine they wait behind every other process
            os.environ.setdefault("RAY_worker_niceness", "0")
            # "local": a new cluster of our own, never one a `ray start` left running on this machine
            ray.init(address="local", num_cpus=workers, include_dashboard=False, logging_level="ERROR",
                     log_to_driver=False)
        else:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise GlowError(f"--executor ray: cannot start or join the cluster{f' at {address}' if address else ''}: "
                        f"{' '.join(str(err).split())[:300]}") from None
    try:
        yield from _ray_tasks(ray, tasks, workers or max(1, int(ray.cluster_resources().get("CPU", 1))))
    finally:
        ray.shutdown()


def _ray_tasks(ray, tasks: Sequence[Task], workers: int) -> Iterator[dict[str, Any]]:
    remote: Callable = ray.remote(num_cpus=1, max_retries=0)(run_point)
    shared = {}  # each model (with its profile) goes to the object store once, not once per point
    for model, _ in tasks:
        if id(model) not in shared:
            shared[id(model)] = ray.put(model)
    queue = list(reversed(tasks))
    pending: dict[Any, Task] = {}
    while queue or pending:
        while queue and len(pending) < workers:
            model, point = queue.pop()
            pending[remote.remote(shared[id(model)], point)] = (model, point)
        done, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)  # a timeout lets Ctrl-C through
        if not done:
            continue
        model, point = pending.pop(done[0])
        try:
            yield ray.get(done[0])
        except ray.exceptions.RayError as err:
            yield lost_row(model, point, f"{type(err).__name__}: {' '.join(str(err).split())[:300]}")


EXECUTORS: dict[str, Callable[[Sequence[Task], int | None, str | None], Iterator[dict[str, Any]]]] = {
    "local": run_local, "ray": run_ray}
