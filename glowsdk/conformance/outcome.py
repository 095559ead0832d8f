"""How a conformance case's exceptions become its status: one rule for the node tests, the model zoo and
the primitive suite."""
from __future__ import annotations

from typing import Callable

from ..errors import GlowError, UnsupportedError


class Mismatch(Exception):
    """Outputs that differ from the oracle's beyond the case's tolerance: the case fails."""


def outcome(run: Callable[[], object]) -> tuple[str, str]:
    """(status, one-line detail) of `run()`: pass; fail on a Mismatch; unsupported when the backend refuses;
    error on any other GlowError, and on a crash, which is a conformance finding, not a harness failure."""
    try:
        run()
        status, detail = "pass", ""
    except Mismatch as err:
        status, detail = "fail", str(err)
    except UnsupportedError as err:
        status, detail = "unsupported", str(err)
    except GlowError as err:
        status, detail = "error", str(err)
    except Exception as err:  # noqa: BLE001 - reported as the case's error
        status, detail = "error", f"{type(err).__name__}: {err}"
    return status, detail.splitlines()[0] if detail else ""
