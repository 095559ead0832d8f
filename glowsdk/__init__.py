"""glowsdk: a graph-lowering ML compiler SDK."""
