"""Profile-guided quantization (paper 4), shared by every backend.

1. Profiling: instrument the lowered, optimised graph so every float value is
   saved (`instrument_for_profiling`), run calibration inputs through it on a
   backend (`collect_profile`), and keep each value's range and histogram in a
   versioned JSON profile (`Profile`, `save_profile`, `load_profile`), keyed by
   the names of the lowered graph's values.
2. Quantization: `compile_function(..., quantization=QuantizationConfig(profile, ...))`
   converts the lowered graph into int8 islands (`convert.py`, parameters from
   `params.py`), which the compiler's QUANTIZATION pipeline then optimises.
"""
from .accuracy import AccuracyReport, OutputAccuracy, compare_outputs
from .calibration import CalibrationSet, calibration_from_dir, calibration_random
from .collect import collect_profile
from .convert import QuantizationConfig, QuantizationReport, quantize_function
from .histogram import DEFAULT_BINS, Histogram
from .instrument import PREFIX, instrument_for_profiling, profiled_values
from .params import CALIBRATIONS, SCHEMAS, calibrated_range, choose_params
from .profile import FORMAT, VERSION, Profile, ValueProfile, format_profile, save_profile
from .profile_reader import load_profile

__all__ = ["AccuracyReport", "CALIBRATIONS", "DEFAULT_BINS", "FORMAT", "PREFIX", "SCHEMAS", "VERSION",
           "CalibrationSet", "Histogram", "OutputAccuracy", "Profile", "QuantizationConfig",
           "QuantizationReport", "ValueProfile", "calibrated_range", "calibration_from_dir",
           "calibration_random", "choose_params", "collect_profile", "compare_outputs", "format_profile",
           "instrument_for_profiling", "load_profile", "profiled_values", "quantize_function",
           "save_profile"]
