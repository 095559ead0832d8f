"""SCALE-Sim v3 compatibility: its inputs, its memory model and its report files.

Architects check a simulator against one they already trust. This package reads SCALE-Sim's own
`.cfg` and topology CSVs (`inputs`), builds each layer's operand streams for the configured
dataflow (`streams`), runs them through SCALE-Sim v3's double-buffered SRAM model fed at the
configured words per cycle (`buffers`), and writes COMPUTE_REPORT, BANDWIDTH_REPORT and
DETAILED_ACCESS_REPORT in its column format (`reports`). `bench/scalesim_compare.py` runs
SCALE-Sim itself on the same inputs and compares.
"""
