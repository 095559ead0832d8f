"""Export the four sequence models of issue 23, seeded random weights, to tests/models/<name>.onnx.

    pip install torch            # CPU build; torch is not a glowsdk dependency
    python scripts/export_seq_models.py

Small (each well under 1 MB) and written by hand from plain torch ops, so that the exported graph is
the textbook one (no fused attention kernel):

    bert_layer     tokens int64 [1,16] (vocab 100), mask float32 [1,1,1,16] -> hidden [1,16,64]
        Embedding(100, 64) + learned positions, LayerNorm, one post-norm encoder layer: 4-head
        self-attention (Q, K, V projections, Q.K^T / 4, + the additive padding mask, Softmax, .V,
        output projection), residual, LayerNorm, GELU (erf) MLP 64 -> 128 -> 64, residual, LayerNorm.
        The mask is 0 for a real token and -inf for padding (the form of torch's attn_mask).
    decoder_layer  tokens int64 [1,16] (vocab 100) -> logits [1,16,100]
        Embedding + positions, one pre-norm causal decoder layer (4 heads; the causal mask a constant
        buffer holding -inf above the diagonal), GELU (tanh) MLP, final LayerNorm, tied-free LM head.
    lstm_seq       sequence float32 [8,1,16] -> logits [1,10]
        nn.LSTM(16, 32), Linear 32 -> 10 on the last time step.
    gru_seq        sequence float32 [8,1,16] -> logits [1,10]
        nn.GRU(16, 32), Linear 32 -> 10 on the last time step.

Every weight is drawn from torch.manual_seed(0) (LayerNorm scales and shifts moved away from 1 and 0),
the models are in eval mode, exported with the TorchScript exporter (dynamo=False), opset 17, constant
folding on; rerunning the script writes the same bytes. It prints each model's op histogram and size.
"""
from __future__ import annotations

import collections
import io
import math
import os
import warnings

import onnx
import torch
from torch import nn

OPSET = 17
SEED = 0
MODELS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "models")
VOCAB, SEQ, D_MODEL, HEADS, FF = 100, 16, 64, 4, 128


class SelfAttention(nn.Module):
    """Multi-head self-attention as the textbook writes it: one MatMul per product, an additive mask."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, d_model // heads
        self.q, self.k, self.v = (nn.Linear(d_model, d_model) for _ in range(3))
        self.out = nn.Linear(d_model, d_model)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        return x.reshape(batch, seq, self.heads, self.head_dim).transpose(1, 2)     # b, h, s, d

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.q(x)), self._split(self.k(x)), self._split(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask
        context = torch.matmul(torch.softmax(scores, dim=-1), v)                    # b, h, s, d
        batch, _, seq, _ = context.shape
        return self.out(context.transpose(1, 2).reshape(batch, seq, -1))


class Mlp(nn.Module):
    def __init__(self, d_model: int, hidden: int, approximate: str) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(d_model, hidden), nn.Linear(hidden, d_model)
        self.act = nn.GELU(approximate=approximate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class BertLayer(nn.Module):
    """BERT's embedding and one post-norm encoder layer, with an additive padding mask input."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.position = nn.Parameter(torch.randn(1, SEQ, D_MODEL) * 0.1)
        self.embed_norm = nn.LayerNorm(D_MODEL)
        self.attn = SelfAttention(D_MODEL, HEADS)
        self.norm1 = nn.LayerNorm(D_MODEL)
        self.mlp = Mlp(D_MODEL, FF, "none")
        self.norm2 = nn.LayerNorm(D_MODEL)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.embed_norm(self.embed(tokens) + self.position)
        x = self.norm1(x + self.attn(x, mask))
        return self.norm2(x + self.mlp(x))


class DecoderLayer(nn.Module):
    """A GPT-style pre-norm causal decoder layer with its embedding and LM head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.position = nn.Parameter(torch.randn(1, SEQ, D_MODEL) * 0.1)
        self.norm1 = nn.LayerNorm(D_MODEL)
        self.attn = SelfAttention(D_MODEL, HEADS)
        self.norm2 = nn.LayerNorm(D_MODEL)
        self.mlp = Mlp(D_MODEL, FF, "tanh")
        self.norm = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, VOCAB)
        self.register_buffer("causal", torch.full((SEQ, SEQ), float("-inf")).triu(1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position
        x = x + self.attn(self.norm1(x), self.causal)
        x = x + self.mlp(self.norm2(x))
        return self.head(self.norm(x))


class Recurrent(nn.Module):
    def __init__(self, cell: type[nn.Module], features: int = 16, hidden: int = 32, classes: int = 10) -> None:
        super().__init__()
        self.rnn = cell(features, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)           # [seq, batch, hidden]
        return self.head(out[-1])      # the last time step: [batch, classes]


def randomize_layernorm(model: nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, nn.LayerNorm):
            with torch.no_grad():
                m.weight.uniform_(0.7, 1.3)
                m.bias.uniform_(-0.2, 0.2)


def padding_mask(real: int) -> torch.Tensor:
    """The additive mask of a sequence whose first `real` tokens are real: 0, then -inf."""
    mask = torch.zeros(1, 1, 1, SEQ)
    mask[..., real:] = float("-inf")
    return mask


def build(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...], list[str], str]:
    """The model with its seeded weights, example inputs, the input names and the output name."""
    torch.manual_seed(SEED)
    tokens = torch.randint(0, VOCAB, (1, SEQ), dtype=torch.int64)
    if name == "bert_layer":
        model = BertLayer()
        randomize_layernorm(model)
        return model, (tokens, padding_mask(12)), ["tokens", "mask"], "hidden"
    if name == "decoder_layer":
        model = DecoderLayer()
        randomize_layernorm(model)
        return model, (tokens,), ["tokens"], "logits"
    if name in ("lstm_seq", "gru_seq"):
        model = Recurrent(nn.LSTM if name == "lstm_seq" else nn.GRU)
        return model, (torch.randn(8, 1, 16),), ["sequence"], "logits"
    raise KeyError(name)


MODELS = ("bert_layer", "decoder_layer", "lstm_seq", "gru_seq")


def export(name: str) -> onnx.ModelProto:
    model, example, input_names, output_name = build(name)
    model.eval()
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # the TorchScript exporter's deprecation notice
        torch.onnx.export(model, example, buffer, dynamo=False, opset_version=OPSET, do_constant_folding=True,
                          training=torch.onnx.TrainingMode.EVAL, input_names=input_names,
                          output_names=[output_name])
    proto = onnx.load_from_string(buffer.getvalue())
    onnx.checker.check_model(proto, full_check=True)
    return proto


def main() -> None:
    torch.set_num_threads(1)
    os.makedirs(MODELS_DIR, exist_ok=True)
    for name in MODELS:
        proto = export(name)
        data = proto.SerializeToString(deterministic=True)
        with open(os.path.join(MODELS_DIR, f"{name}.onnx"), "wb") as f:
            f.write(data)
        histogram = collections.Counter(node.op_type for node in proto.graph.node)
        inputs = ", ".join(f"{i.name}{[d.dim_value for d in i.type.tensor_type.shape.dim]}" for i in proto.graph.input)
        print(f"{name}: {len(data)} bytes, {inputs}")
        print("  " + ", ".join(f"{op} {n}" for op, n in sorted(histogram.items())))


if __name__ == "__main__":
    main()
