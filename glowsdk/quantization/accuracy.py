"""How far a quantized network's outputs are from the float network's (paper 4, issue 5 item 7).

Each output is compared over all held-out samples at once: the samples' arrays
are concatenated along the batch axis and flattened for the cosine similarity
and the absolute errors. A classifier output (rank 2 with more than one class,
or rank 4 with a trailing 1x1, as a Softmax after a global pooling leaves it)
also gets its top-1 agreement: the fraction of rows whose argmax is the same in
both runs. With labels (one per row), both runs' top-1 accuracy is reported,
which is what "quantization keeps the accuracy" is judged by.

A NaN or infinity in the quantized output is counted (`nonfinite`) and left to
propagate into the metrics, so a broken kernel shows as NaN, not as a good
score; a row holding one never agrees. The report is plain numpy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from ..table import format_table

SUMMARY_HEADERS: tuple[str, ...] = ("cosine", "max abs err", "top-1 agreement")


def cosine_similarity(reference: np.ndarray, quantized: np.ndarray) -> float:
    """The cosine of the angle between two arrays taken as flat vectors, in float64.

    Two all-zero vectors are identical, so 1.0; one all-zero vector against a
    non-zero one has no direction in common, so 0.0. Non-finite values give NaN.
    """
    a = np.asarray(reference, dtype=np.float64).ravel()
    b = np.asarray(quantized, dtype=np.float64).ravel()
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return math.nan
    norm_a, norm_b = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if norm_a == 0.0 or norm_b == 0.0:
        return 1.0 if norm_a == norm_b else 0.0
    # clip: rounding can push the quotient of parallel vectors just past 1
    return float(np.clip(np.dot(a, b) / (norm_a * norm_b), -1.0, 1.0))


def is_classifier(shape: Sequence[int]) -> bool:
    """Whether an output of `shape` (batch first) holds one score per class per row."""
    if len(shape) == 2:
        return shape[1] > 1
    return len(shape) == 4 and shape[1] > 1 and tuple(shape[2:]) == (1, 1)


def class_rows(array: np.ndarray) -> np.ndarray:
    """A classifier output as (rows, classes)."""
    return np.asarray(array).reshape(array.shape[0], array.shape[1])


def top1(array: np.ndarray) -> np.ndarray:
    """Each row's predicted class; the first of tied maxima, as np.argmax picks."""
    return class_rows(array).argmax(axis=1)


@dataclass
class OutputAccuracy:
    """The metrics of one output over all samples."""

    name: str
    shape: tuple[int, ...]  # the concatenated output, batch axis first
    cosine: float
    max_abs_error: float
    mean_abs_error: float
    nonfinite: int  # NaN and infinite elements in the quantized output
    top1_agree: int | None = None  # rows whose argmax matches; None unless a classifier
    float_top1_correct: int | None = None  # rows where the float argmax is the label; None without labels
    quantized_top1_correct: int | None = None

    @property
    def rows(self) -> int:
        return self.shape[0] if self.shape else 0

    @property
    def top1_agreement(self) -> float | None:
        return _fraction(self.top1_agree, self.rows)

    @property
    def float_top1_accuracy(self) -> float | None:
        return _fraction(self.float_top1_correct, self.rows)

    @property
    def quantized_top1_accuracy(self) -> float | None:
        return _fraction(self.quantized_top1_correct, self.rows)

    def to_json(self) -> dict:
        """A JSON-safe dict: non-finite metrics become null (`nonfinite` says why)."""
        return {
            "name": self.name, "shape": list(self.shape), "cosine": _finite_or_none(self.cosine),
            "max_abs_error": _finite_or_none(self.max_abs_error),
            "mean_abs_error": _finite_or_none(self.mean_abs_error), "nonfinite": self.nonfinite,
            "rows": self.rows, "top1_agree": self.top1_agree, "top1_agreement": self.top1_agreement,
            "float_top1_correct": self.float_top1_correct, "float_top1_accuracy": self.float_top1_accuracy,
            "quantized_top1_correct": self.quantized_top1_correct,
            "quantized_top1_accuracy": self.quantized_top1_accuracy,
        }

    def summary_cells(self) -> list[str]:
        """The cells under SUMMARY_HEADERS, for tables that compare quantizers."""
        return [format_cosine(self.cosine), format_error(self.max_abs_error),
                format_count(self.top1_agree, self.rows)]


@dataclass
class AccuracyReport:
    """Float against quantized, per output, over `samples` held-out samples."""

    samples: int
    outputs: list[OutputAccuracy] = field(default_factory=list)
    labelled: bool = False

    def to_json(self) -> dict:
        return {"samples": self.samples, "labelled": self.labelled, "outputs": [o.to_json() for o in self.outputs]}

    def table(self) -> str:
        """One row per output; accuracy columns only when labels were given."""
        headers = ["output", "cosine", "max abs err", "mean abs err", "top-1 agreement", "non-finite"]
        if self.labelled:
            headers += ["float top-1 acc", "quantized top-1 acc"]
        rows = []
        for o in self.outputs:
            row = [o.name, format_cosine(o.cosine), format_error(o.max_abs_error), format_error(o.mean_abs_error),
                   format_count(o.top1_agree, o.rows), o.nonfinite]
            if self.labelled:
                row += [format_count(o.float_top1_correct, o.rows), format_count(o.quantized_top1_correct, o.rows)]
            rows.append(row)
        return format_table(headers, rows) + f"\n\n{self.samples} samples"


def output_accuracy(name: str, reference: np.ndarray, quantized: np.ndarray,
                    labels: np.ndarray | None = None) -> OutputAccuracy:
    """The metrics of one output, given its float and quantized values over all samples (batch axis first)."""
    reference, quantized = np.asarray(reference), np.asarray(quantized)
    if reference.shape != quantized.shape:
        raise ValueError(f"output '{name}': quantized shape {list(quantized.shape)} "
                         f"differs from float shape {list(reference.shape)}")
    ref64, quant64 = reference.astype(np.float64), quantized.astype(np.float64)
    diff = np.abs(ref64 - quant64)
    result = OutputAccuracy(
        name, tuple(reference.shape), cosine_similarity(ref64, quant64),
        max_abs_error=float(diff.max()) if diff.size else 0.0,
        mean_abs_error=float(diff.mean()) if diff.size else 0.0,
        nonfinite=int(np.count_nonzero(~np.isfinite(quant64))))
    if not is_classifier(reference.shape):
        return result
    finite_rows = np.all(np.isfinite(class_rows(quant64)), axis=1)
    want, got = top1(ref64), top1(quant64)
    result.top1_agree = int(np.count_nonzero((want == got) & finite_rows))
    if labels is not None:
        labels = np.asarray(labels).reshape(-1)
        if labels.shape[0] != result.rows:
            raise ValueError(f"output '{name}': {labels.shape[0]} labels for {result.rows} rows")
        result.float_top1_correct = int(np.count_nonzero(want == labels))
        result.quantized_top1_correct = int(np.count_nonzero((got == labels) & finite_rows))
    return result


def compare_outputs(reference: Sequence[Mapping[str, np.ndarray]], quantized: Sequence[Mapping[str, np.ndarray]],
                    labels: Sequence[int] | np.ndarray | None = None) -> AccuracyReport:
    """The accuracy report of `quantized` against `reference`, both one {output name: array} per sample.

    Outputs are taken in the reference's order; `labels` holds one class per
    classifier row, all samples' rows in order.
    """
    if len(reference) != len(quantized):
        raise ValueError(f"{len(quantized)} quantized samples for {len(reference)} float samples")
    if not reference:
        raise ValueError("no samples to compare")
    report = AccuracyReport(len(reference), labelled=labels is not None)
    label_array = None if labels is None else np.asarray(labels)
    for name in reference[0]:
        missing = [i for i, sample in enumerate(quantized) if name not in sample]
        if missing:
            raise ValueError(f"output '{name}' is missing from quantized sample {missing[0]}")
        ref = np.concatenate([np.asarray(s[name]) for s in reference])
        quant = np.concatenate([np.asarray(s[name]) for s in quantized])
        report.outputs.append(output_accuracy(name, ref, quant, label_array))
    return report


def format_cosine(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.6f}"


def format_error(value: float) -> str:
    return f"{value:.3g}"


def format_count(count: int | None, total: int) -> str:
    """'96.9% (31/32)', or '-' when the metric does not apply."""
    if count is None:
        return "-"
    return f"{100.0 * count / total:.1f}% ({count}/{total})" if total else "-"


def _fraction(count: int | None, total: int) -> float | None:
    return None if count is None or total == 0 else count / total


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None
