"""Test helper: the small PyTorch-exported models in tests/models and seeded inputs for them.

scripts/export_test_models.py writes the models (torch is needed only to regenerate them):

    mobilenet_v2_mini    image float32 [1,3,64,64]      -> logits [1,10]
    transformer_encoder  tokens int64 [1,16] (vocab 100) -> logits [1,16,10]
    lstm                 sequence float32 [20,1,32]     -> logits [1,10]
    unet_small           image float32 [1,3,32,32]      -> mask [1,2,32,32]
    encoder_layer        tokens int64 [1,64] (vocab 100) -> logits [1,64,10]
"""
from __future__ import annotations

import os

import numpy as np
import onnx

MODELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
EXPORTED_MODELS = ("mobilenet_v2_mini", "transformer_encoder", "lstm", "unet_small")
ENCODER_LAYER = "encoder_layer"
"""One wider transformer encoder layer (d_model 192, 64 tokens): the NPU partition-count case."""

# Integer inputs are token ids: drawn in [0, vocabulary size) so that every Gather is in range.
TOKEN_RANGES = {("transformer_encoder", "tokens"): 100, (ENCODER_LAYER, "tokens"): 100}


def exported_model(name: str) -> str:
    """The path of the exported model `name` (one of EXPORTED_MODELS)."""
    if name not in (*EXPORTED_MODELS, ENCODER_LAYER):
        raise KeyError(f"no exported model '{name}' (have: {', '.join(EXPORTED_MODELS)})")
    return os.path.join(MODELS_DIR, f"{name}.onnx")


def model_inputs(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input of `name`, by input name: float inputs standard
    normal, token ids uniform over the vocabulary."""
    model = onnx.load(exported_model(name), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        shape = tuple(d.dim_value for d in tensor.shape.dim)
        if np.issubdtype(dtype, np.floating):
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        else:
            high = TOKEN_RANGES[(name, value.name)]
            feeds[value.name] = rng.integers(0, high, shape).astype(dtype)
    return feeds
