"""glowsdk backend for the imaginary Acme NPU-1, an example of a vendor plugin.

The package registers `AcmeBackend` under the `glowsdk.backends` entry-point
group (see pyproject.toml); glowsdk finds it there, nothing in glowsdk names it.
"""
from .backend import AcmeBackend

__all__ = ["AcmeBackend"]
