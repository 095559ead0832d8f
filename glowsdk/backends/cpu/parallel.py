"""Running a compiled program on several threads of this process (`threads` compile option).

Every thread calls the module's thread entry (codegen/module.py) with its index;
the heavy kernels split their tiles among the threads and a barrier separates
kernels (codegen/threads.py), so the host only starts the threads and joins
them. ctypes releases the GIL for the duration of each foreign call, so the
Python threads run the machine code truly in parallel.
"""
from __future__ import annotations

import threading
from typing import Any

from ...errors import UnsupportedError
from .codegen.module import THREAD_ENTRY
from .codegen.threads import MAX_THREADS


def thread_count(value: Any) -> int:
    """The `threads` option checked: a whole number from 1 to MAX_THREADS."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_THREADS:
        raise UnsupportedError(f"the cpu backend's threads option must be a whole number from 1 to "
                               f"{MAX_THREADS}, got {value!r}")
    return value


def run_program(jit: Any, threads: int, constants: int, activations: int, placeholders: int) -> int:
    """Run the program on `threads` threads; the status of the first thread that failed (0 if none)."""
    if threads == 1:
        return jit.entry(constants, activations, placeholders)
    entry = jit.functions[THREAD_ENTRY]
    statuses = [0] * threads

    def work(index: int) -> None:
        statuses[index] = entry(constants, activations, placeholders, index, threads)

    workers = [threading.Thread(target=work, args=(index,), daemon=True) for index in range(1, threads)]
    for worker in workers:
        worker.start()
    work(0)
    for worker in workers:
        worker.join()
    return next((status for status in statuses if status), 0)
