"""The glowsdk command line."""
