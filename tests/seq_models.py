"""Test helper: issue 23's sequence models in tests/models (scripts/export_seq_models.py) and seeded inputs.

    bert_layer     tokens int64 [1,16] (vocab 100), mask float32 [1,1,1,16] (0 or -inf) -> hidden [1,16,64]
    decoder_layer  tokens int64 [1,16] (vocab 100)                                     -> logits [1,16,100]
    lstm_seq       sequence float32 [8,1,16]                                            -> logits [1,10]
    gru_seq        sequence float32 [8,1,16]                                            -> logits [1,10]
"""
from __future__ import annotations

import os

import numpy as np
import onnx

MODELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
SEQ_MODELS = ("bert_layer", "decoder_layer", "lstm_seq", "gru_seq")
VOCAB = 100


def seq_model(name: str) -> str:
    if name not in SEQ_MODELS:
        raise KeyError(f"no sequence model '{name}' (have: {', '.join(SEQ_MODELS)})")
    return os.path.join(MODELS_DIR, f"{name}.onnx")


def seq_inputs(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Token ids uniform over the vocabulary; a padding mask of 0 for the first 8..16 tokens and -inf after;
    other float inputs standard normal."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in onnx.load(seq_model(name), load_external_data=False).graph.input:
        tensor = value.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        shape = tuple(d.dim_value for d in tensor.shape.dim)
        if value.name == "tokens":
            feeds[value.name] = rng.integers(0, VOCAB, shape).astype(dtype)
        elif value.name == "mask":
            mask = np.zeros(shape, dtype)
            mask[..., int(rng.integers(8, shape[-1] + 1)):] = -np.inf
            feeds[value.name] = mask
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
    return feeds
