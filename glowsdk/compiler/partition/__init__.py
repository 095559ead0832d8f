"""Heterogeneous execution: placing a graph on a target and its fallback device, and running the parts."""
