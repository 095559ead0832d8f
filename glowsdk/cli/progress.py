"""Progress lines on stderr for long work: a live counter on a terminal, sparse lines in logs."""
from __future__ import annotations

import sys
import time


class Progress:
    """Reports `done/total` with a label; quiet unless the work takes a while."""

    def __init__(self, what: str, stream=None) -> None:
        self.what = what
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.start = time.perf_counter()
        self.last_line = 0.0
        self.shown = False

    def __call__(self, done: int, total: int, label: str = "") -> None:
        now = time.perf_counter()
        elapsed = now - self.start
        if self.tty:
            text = f"\r{self.what}: {done}/{total} {label[:60]:<60} {elapsed:6.1f}s"
            self.stream.write(text)
            self.stream.flush()
            self.shown = True
        elif now - self.last_line >= 10.0 or done == total:
            self.stream.write(f"{self.what}: {done}/{total} ({elapsed:.0f}s) {label}\n")
            self.stream.flush()
            self.last_line = now

    def close(self) -> None:
        if self.tty and self.shown:
            self.stream.write("\n")
            self.stream.flush()
