"""Profile-guided quantization (paper 4.2), step 1: profiling.

Instrument the lowered, optimised graph so every float value is saved
(`instrument_for_profiling`), run calibration inputs through it on a backend
(`collect_profile`), and keep each value's range and histogram in a versioned
JSON profile (`Profile`, `save_profile`, `load_profile`). Profiles are keyed by
the names of the lowered graph's values, which quantization will look up.
"""
from .calibration import CalibrationSet, calibration_from_dir, calibration_random
from .collect import collect_profile
from .histogram import DEFAULT_BINS, Histogram
from .instrument import PREFIX, instrument_for_profiling, profiled_values
from .profile import FORMAT, VERSION, Profile, ValueProfile, format_profile, load_profile, save_profile

__all__ = ["DEFAULT_BINS", "FORMAT", "PREFIX", "VERSION", "CalibrationSet", "Histogram", "Profile", "ValueProfile",
           "calibration_from_dir", "calibration_random", "collect_profile", "format_profile",
           "instrument_for_profiling", "load_profile", "profiled_values", "save_profile"]
