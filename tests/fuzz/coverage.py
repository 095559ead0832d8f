"""Line coverage of the SDK's own code, cheap enough to run under every mutant (no dependency).

`LineTracer` installs a `sys.settrace` function that, on each call, looks the frame's file up
once (a dict of filename -> bool) and traces the frame only when the file lies under one of the
SDK's packages (glowsdk/, isa/, sim/, firmware_runtime/): frames of numpy, onnx, protobuf, the
standard library and the fuzzer itself get `None`, so Python runs them untraced. A traced frame
adds `(filename, line)` to the current set on each 'line' event, nothing more.

    tracer = LineTracer()
    with tracer.recording() as lines:
        glowsdk.load(path)
    # lines: the set of (filename, line) the call reached

With `arcs=True` it records edges instead, `(filename, previous line, line)` within one frame
(the previous line of a frame's first line is minus the function's first line), the finer
signal the guided fuzzer uses; `lines_of(arcs)` gives the lines.
"""
from __future__ import annotations

import contextlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("glowsdk", "isa", "sim", "firmware_runtime")


class LineTracer:
    """Records the (filename, line) pairs executed in files under `packages` of `root`."""

    def __init__(self, packages=PACKAGES, root: str = ROOT, arcs: bool = False):
        self.arcs = arcs
        self.prefixes = tuple(os.path.join(root, p) + os.sep for p in packages)
        self._interest: dict[str, bool] = {}
        self._lines: set[tuple[str, int]] = set()

    def wanted(self, filename: str) -> bool:
        ok = self._interest.get(filename)
        if ok is None:
            ok = self._interest[filename] = os.path.abspath(filename).startswith(self.prefixes)
        return ok

    def _call(self, frame, event, arg):
        code = frame.f_code
        ok = self._interest.get(code.co_filename)
        if ok is None:
            ok = self.wanted(code.co_filename)
        if not ok:
            return None
        add = self._lines.add
        filename = code.co_filename
        if self.arcs:
            prev = [-code.co_firstlineno]

            def arc(frame, event, arg):
                if event == "line":
                    line = frame.f_lineno
                    add((filename, prev[0], line))
                    prev[0] = line
                return arc

            return arc

        def local(frame, event, arg):
            if event == "line":
                add((filename, frame.f_lineno))
            return local

        return local

    @contextlib.contextmanager
    def recording(self):
        """Trace the block; yields the set the block's lines go into (filled once it exits)."""
        lines: set[tuple[str, int]] = set()
        self._lines = lines
        previous = sys.gettrace()
        sys.settrace(self._call)
        try:
            yield lines
        finally:
            sys.settrace(previous)
            self._lines = set()

    def files(self) -> list[str]:
        """The files of interest the tracer has met so far."""
        return sorted(f for f, ok in self._interest.items() if ok)


def lines_of(records: set) -> set[tuple[str, int]]:
    """(filename, line) of each record, whether lines or arcs."""
    return {(r[0], r[-1]) for r in records}
