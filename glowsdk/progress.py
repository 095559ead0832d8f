"""Progress on stderr for work that can take seconds: one API over tqdm for the whole SDK.

A bar is drawn only when stderr is a terminal (logs and pipes stay clean; tqdm is not even
imported, which a short command's start-up would notice). While a bar is
open a ticker redraws it twice a second, so its elapsed time moves even through one long call
(an LLVM compile, a graph pass) that reports no counts of its own: no step looks hung.
"""
from __future__ import annotations

import os
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, TypeVar

if TYPE_CHECKING:
    from tqdm import tqdm

T = TypeVar("T")

TICK_SECONDS = 0.5
"""How often an open bar is redrawn when its work reports nothing."""


def interactive() -> bool:
    """Whether progress is shown: stderr is a terminal."""
    stream = sys.stderr
    return bool(getattr(stream, "isatty", None) and stream.isatty())


def _format(total: int | None, unit: str) -> str:
    """A bar with a known total; else the count (none for a one-step bar, `unit` ""), the label, the time."""
    if total:
        return "{desc}: {n_fmt}/{total_fmt} {unit} |{bar:20}| {elapsed}{postfix}"
    return "{desc}{postfix} ({elapsed})" if not unit else "{desc}: {n_fmt} {unit}{postfix} ({elapsed})"


def _terminal_columns() -> int:
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 0


class Progress:
    """A bar for `what`, fed `(done, total, label)`; a context manager, quiet off a terminal.

    `total` may be unknown (None): the bar then counts `unit`s (or, with `unit` "", only shows the
    label of the step it is on) and the time taken.
    """

    def __init__(self, what: str, total: int | None = None, unit: str = "step") -> None:
        self._bar: tqdm | None = None
        if not interactive():
            return
        from tqdm import tqdm

        sized = _terminal_columns() > 0  # a fresh pseudo-terminal may report no size: then 80x24 is assumed
        self._bar = tqdm(total=total, desc=what, unit=unit, file=sys.stderr, leave=False, dynamic_ncols=sized,
                         ncols=None if sized else 80, nrows=None if sized else 24, mininterval=0.1,
                         bar_format=_format(total, unit))
        _TICKER.add(self._bar)

    def __call__(self, done: int, total: int | None = None, label: str = "") -> None:
        bar = self._bar
        if bar is None:
            return
        if total is not None and total != bar.total:
            bar.total = total
            bar.bar_format = _format(total, bar.unit)
        bar.set_postfix_str(label[:60], refresh=False)
        bar.update(done - bar.n)

    def step(self, label: str) -> None:
        """One more unit done, now working on `label`."""
        if self._bar is not None:
            self(self._bar.n + 1, None, label)

    def label(self, label: str) -> None:
        """Name what is being worked on without counting a unit."""
        if self._bar is not None:
            self._bar.set_postfix_str(label[:60])

    def close(self) -> None:
        if self._bar is not None:
            _TICKER.discard(self._bar)
            self._bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def progress(items: Iterable[T], what: str, total: int | None = None, unit: str = "step",
             label: Callable[[T], object] | None = None) -> Iterator[T]:
    """`items`, counted on a bar; `label(item)` names the item being worked on."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Progress(what, total, unit) as bar:
        for done, item in enumerate(items):
            if label is not None:
                bar.label(str(label(item)))
            yield item
            bar(done + 1)


class _Ticker:
    """One daemon thread redrawing the open bars every TICK_SECONDS (tqdm redraws only on updates)."""

    def __init__(self) -> None:
        self._bars: weakref.WeakSet = weakref.WeakSet()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, bar: tqdm) -> None:
        with self._lock:
            self._bars.add(bar)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="glowsdk-progress", daemon=True)
                self._thread.start()

    def discard(self, bar: tqdm) -> None:
        with self._lock:
            self._bars.discard(bar)

    def _run(self) -> None:
        while not self._wake.wait(TICK_SECONDS):
            with self._lock:
                bars = list(self._bars)
                if not bars:
                    self._thread = None
                    return
            for bar in bars:
                bar.refresh()


_TICKER = _Ticker()
