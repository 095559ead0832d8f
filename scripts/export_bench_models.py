"""Export the untuned benchmark set: PyTorch/torchvision architectures with seeded random weights.

    pip install torch==2.14.1 torchvision==0.29.1     # not glowsdk dependencies
    python scripts/export_bench_models.py [--only mobilenet_v2,gru] [--list] [--out bench/models]

These are the networks glowsdk was *not* tuned on (issues 21 and 24): every benchmark
(`bench/cpu_vs_onnxruntime.py --set untuned`, `bench/npu_roofline.py`) and every claim about
"networks outside bench/" is judged on the whole set, never on one model. The files are large
(up to ~110 MB) and reproducible, so they are written to `bench/models/` (ignored by git) with a
`manifest.json` (input name, shape and dtype, output name, size, SHA-256, op histogram), and
rebuilt by this script rather than committed.

Weights come from `torch.manual_seed(0)` and torchvision's own initialisers (`weights=None`);
BatchNorm and LayerNorm statistics and affine parameters are randomised so that no
normalisation is the identity. The models are exported in eval mode with the TorchScript
exporter (`dynamo=False`), opset 17, constant folding on, batch 1. Rerunning writes the same
bytes with the same torch version.
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import io
import json
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import onnx
import torch
from torch import nn

OPSET = 17
SEED = 0
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "bench", "models")


@dataclass(frozen=True)
class Entry:
    """One architecture of the set: how to build it and what it exercises."""

    build: Callable[[], nn.Module]
    example: Callable[[], torch.Tensor]
    features: str


def _tv(name: str, **kwargs) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import torchvision.models as models
        return getattr(models, name)(weights=None, **kwargs)
    return build


def _image(size: int = 224) -> Callable[[], torch.Tensor]:
    return lambda: torch.randn(1, 3, size, size)


def _vit_tiny() -> nn.Module:
    from torchvision.models.vision_transformer import VisionTransformer
    # DeiT-tiny's shape: the smallest standard ViT (ViT-B/16 is 330 MB of random weights).
    return VisionTransformer(image_size=224, patch_size=16, num_layers=12, num_heads=3,
                             hidden_dim=192, mlp_dim=768)


class AudioM5(nn.Module):
    """The M5 raw-waveform classifier (Dai et al. 2017): a first 1-D convolution with one input
    channel, kernel 80 and stride 16, then 3-tap convolutions and max pooling."""

    def __init__(self, classes: int = 35, width: int = 128) -> None:
        super().__init__()

        def block(cin: int, cout: int, kernel: int, stride: int = 1) -> list[nn.Module]:
            return [nn.Conv1d(cin, cout, kernel, stride), nn.BatchNorm1d(cout), nn.ReLU(), nn.MaxPool1d(4)]

        self.features = nn.Sequential(*block(1, width, 80, 16), *block(width, width, 3),
                                      *block(width, 2 * width, 3), *block(2 * width, 2 * width, 3))
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x).mean(dim=-1)
        return self.head(x)


class TextEncoder(nn.Module):
    """A BERT-small-like encoder: embeddings, 4 post-norm layers (d 256, 4 heads, GELU), pooled head."""

    def __init__(self, vocab: int = 8000, seq: int = 128, d_model: int = 256, layers: int = 4,
                 classes: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.position = nn.Parameter(torch.randn(1, seq, d_model) * 0.02)
        self.norm_in = nn.LayerNorm(d_model)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, nhead=4, dim_feedforward=4 * d_model, dropout=0.0,
                                       activation="gelu", batch_first=True)
            for _ in range(layers))
        self.head = nn.Linear(d_model, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.norm_in(self.embed(tokens) + self.position)
        for layer in self.layers:
            x = layer(x)
        return self.head(x[:, 0])


class Recurrent(nn.Module):
    """A 2-layer recurrent sequence classifier over the last time step."""

    def __init__(self, cell: type[nn.RNNBase], features: int = 64, hidden: int = 128,
                 classes: int = 10) -> None:
        super().__init__()
        self.rnn = cell(features, hidden, num_layers=2)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.head(out[-1])


class _Logits(nn.Module):
    """Segmentation models return a dict; the exporter wants a tensor."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.inner(x)
        return out["out"] if isinstance(out, dict) else out


def _lraspp() -> nn.Module:
    import torchvision.models.segmentation as seg
    return _Logits(seg.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None))


MODELS: dict[str, Entry] = {
    "mobilenet_v2": Entry(_tv("mobilenet_v2"), _image(), "depthwise 3x3, ReLU6, inverted residuals"),
    "mobilenet_v3_small": Entry(_tv("mobilenet_v3_small"), _image(),
                                "depthwise 3x3/5x5, squeeze-excitation, HardSwish, HardSigmoid"),
    "mobilenet_v3_large": Entry(_tv("mobilenet_v3_large"), _image(),
                                "depthwise, squeeze-excitation, HardSwish"),
    "efficientnet_b0": Entry(_tv("efficientnet_b0"), _image(), "depthwise, squeeze-excitation, SiLU"),
    "mnasnet1_0": Entry(_tv("mnasnet1_0"), _image(), "depthwise 3x3/5x5, ReLU"),
    "shufflenet_v2": Entry(_tv("shufflenet_v2_x1_0"), _image(), "channel shuffle, split, depthwise"),
    "regnet_y_400mf": Entry(_tv("regnet_y_400mf"), _image(), "grouped convolutions, squeeze-excitation"),
    "resnet18": Entry(_tv("resnet18"), _image(), "plain 3x3 convolutions, residual adds"),
    "googlenet": Entry(_tv("googlenet", aux_logits=False, init_weights=True), _image(),
                       "inception branches, concat, 5x5 and 1x1 convolutions"),
    "convnext_tiny": Entry(_tv("convnext_tiny"), _image(),
                           "depthwise 7x7, LayerNorm over channels, GELU, 4x4 patchify"),
    "vit_tiny": Entry(_vit_tiny, _image(), "16x16 patch embedding, attention, LayerNorm, GELU"),
    "text_encoder": Entry(TextEncoder, lambda: torch.randint(0, 8000, (1, 128), dtype=torch.int64),
                          "embedding Gather, attention, LayerNorm, GELU"),
    "audio_m5": Entry(AudioM5, lambda: torch.randn(1, 1, 16000),
                      "1-D convolutions, kernel 80 stride 16 on one channel"),
    "gru": Entry(lambda: Recurrent(nn.GRU), lambda: torch.randn(50, 1, 64), "GRU, 50 time steps"),
    "lstm": Entry(lambda: Recurrent(nn.LSTM), lambda: torch.randn(50, 1, 64), "LSTM, 50 time steps"),
    "lraspp_mobilenet_v3": Entry(_lraspp, _image(), "segmentation head, Resize, Sigmoid gating"),
}


def _randomize_norms(model: nn.Module) -> None:
    """Non-trivial statistics and affine parameters, so no normalisation is the identity."""
    for m in model.modules():
        with torch.no_grad():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
            if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.LayerNorm)) and m.weight is not None:
                m.weight.uniform_(0.7, 1.3)
                m.bias.uniform_(-0.2, 0.2)


def export(name: str) -> tuple[onnx.ModelProto, torch.Tensor]:
    """The ONNX model of one entry, exported from its seeded random weights."""
    entry = MODELS[name]
    torch.manual_seed(SEED)
    model = entry.build()
    _randomize_norms(model)
    model.eval()
    example = entry.example()
    buffer = io.BytesIO()
    input_name = "tokens" if example.dtype == torch.int64 else "input"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # the TorchScript exporter's deprecation notice
        torch.onnx.export(model, (example,), buffer, dynamo=False, opset_version=OPSET,
                          do_constant_folding=True, input_names=[input_name], output_names=["output"])
    proto = onnx.load_from_string(buffer.getvalue())
    onnx.checker.check_model(proto)
    return proto, example


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated names (default: all)")
    parser.add_argument("--out", default=DEFAULT_OUT, help="output folder (default: bench/models)")
    parser.add_argument("--list", action="store_true", help="print the set and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, entry in MODELS.items():
            print(f"{name:22s} {entry.features}")
        return 0
    names = args.only.split(",") if args.only else list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"error: unknown model(s) {', '.join(unknown)}; --list shows the set", file=sys.stderr)
        return 2
    # nn.TransformerEncoderLayer's fused inference path has no ONNX export: trace the plain ops.
    torch.backends.mha.set_fastpath_enabled(False)
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    manifest_path = os.path.join(args.out, "manifest.json")
    manifest: dict = {}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
    for i, name in enumerate(names, 1):
        print(f"[{i}/{len(names)}] exporting {name} ...", file=sys.stderr, flush=True)
        proto, example = export(name)
        data = proto.SerializeToString(deterministic=True)
        path = os.path.join(args.out, f"{name}.onnx")
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
        histogram = collections.Counter(node.op_type for node in proto.graph.node)
        manifest[name] = {
            "file": f"{name}.onnx", "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
            "input": proto.graph.input[0].name, "shape": list(example.shape),
            "dtype": str(example.dtype).removeprefix("torch."), "output": proto.graph.output[0].name,
            "features": MODELS[name].features, "ops": dict(sorted(histogram.items())),
            "torch": torch.__version__,
        }
        print(f"    {len(data) / 1e6:.1f} MB, {sum(histogram.values())} nodes", file=sys.stderr)
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    print(f"wrote {len(names)} model(s) and {manifest_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
