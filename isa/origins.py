"""The model node each layer of a binary implements, kept in its metadata for people's reports.

The compiler writes `origins`: layer (debug range) name -> [ONNX node name, op type]. Names only
label reports (simulate, compile --report, disasm), so a reader leaves out an entry of another
form rather than refusing the file.
"""
from __future__ import annotations

ORIGINS_KEY = "origins"


def origins_from_metadata(metadata: dict) -> dict[str, tuple[str, str]]:
    """Layer name -> (ONNX node name, op type), the well-formed entries of the metadata's origins."""
    origins = metadata.get(ORIGINS_KEY)
    if not isinstance(origins, dict):
        return {}
    return {layer: (entry[0], entry[1]) for layer, entry in origins.items()
            if isinstance(entry, list) and len(entry) == 2 and all(isinstance(e, str) for e in entry)}
