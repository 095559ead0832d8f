"""Export four small PyTorch models with seeded random weights to tests/models/<name>.onnx.

    pip install torch            # CPU build; torch is not a glowsdk dependency
    python scripts/export_test_models.py

The models are real in structure but small (well under 1 MB each), so that
tests/test_exported_models.py can run them in glowsdk's interpreter and cpu
targets against onnxruntime in a few seconds:

    mobilenet_v2_mini    image [1,3,64,64] -> logits [1,10]
        stem Conv 3x3/2 + BatchNorm + ReLU6, four inverted-residual blocks
        (1x1 expand + BN + ReLU6, 3x3 depthwise + BN + ReLU6, 1x1 project + BN,
        residual Add where the shapes match; one stride-2 block), 1x1 Conv + BN
        + ReLU6, global average pool, flatten, Linear 64 -> 10.
    transformer_encoder  token ids int64 [1,16] (vocab 100) -> logits [1,16,10]
        Embedding(100, 64) + learned positional embedding, two
        nn.TransformerEncoderLayer (d_model 64, 4 heads, ff 128, GELU, batch
        first), LayerNorm, Linear 64 -> 10.
    lstm                 sequence [20,1,32] -> logits [1,10]
        nn.LSTM(32, 48, num_layers=2), Linear 48 -> 10 on the last time step.
    unet_small           image [1,3,32,32] -> mask logits [1,2,32,32]
        two encoder levels (Conv 3x3 + ReLU twice, MaxPool 2), a bottleneck
        block, two decoder levels (ConvTranspose 2x2/2 on one, nearest
        Upsample x2 on the other; Concat with the skip; Conv 3x3 + ReLU
        twice), Conv 1x1 -> 2 channels.

Every weight is drawn from torch.manual_seed, the models are in eval mode and
exported with the TorchScript exporter (dynamo=False), opset 17, constant
folding on. The mobilenet is exported with TrainingMode.PRESERVE so that its
BatchNormalization nodes (inference mode, non-trivial random statistics) stay in
the ONNX file for glowsdk to fold, instead of the exporter folding them into the
convolutions. Rerunning the script writes the same bytes. It prints each
model's op histogram and file size and writes nothing but the four .onnx files.
"""
from __future__ import annotations

import collections
import io
import os
import warnings

import onnx
import torch
from torch import nn

OPSET = 17
SEED = 0
MODELS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "models")


# ---------------------------------------------------------------------------------------------
# mobilenet_v2_mini

def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
            relu6: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
                               nn.BatchNorm2d(cout)]
    if relu6:
        layers.append(nn.ReLU6())
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.residual = stride == 1 and cin == cout
        self.block = nn.Sequential(
            conv_bn(cin, hidden, 1),                                 # expand
            conv_bn(hidden, hidden, 3, stride, groups=hidden),       # depthwise
            conv_bn(hidden, cout, 1, relu6=False),                   # project (linear bottleneck)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.residual else y


class MobileNetV2Mini(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(3, 16, 3, stride=2),                  # 64x64 -> 32x32
            InvertedResidual(16, 16, 1, 2),               # residual
            InvertedResidual(16, 24, 2, 4),               # 32x32 -> 16x16
            InvertedResidual(24, 24, 1, 4),               # residual
            InvertedResidual(24, 32, 1, 4),
            conv_bn(32, 64, 1),                           # final 1x1
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def randomize_batchnorm(model: nn.Module) -> None:
    """Non-trivial statistics and affine parameters, so that BatchNorm is not the identity."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.3, 0.3)


# ---------------------------------------------------------------------------------------------
# transformer_encoder

class TransformerEncoderModel(nn.Module):
    def __init__(self, vocab: int = 100, seq: int = 16, d_model: int = 64, layers: int = 2,
                 classes: int = 10) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.position = nn.Parameter(torch.randn(1, seq, d_model) * 0.1)
        # Built one by one rather than with nn.TransformerEncoder, which deep-copies one layer so
        # that every layer starts with the same weights.
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, nhead=4, dim_feedforward=128, dropout=0.0,
                                       activation="gelu", batch_first=True)
            for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def randomize_layernorm(model: nn.Module) -> None:
    """LayerNorm's scale and shift away from 1 and 0."""
    for m in model.modules():
        if isinstance(m, nn.LayerNorm):
            with torch.no_grad():
                m.weight.uniform_(0.7, 1.3)
                m.bias.uniform_(-0.2, 0.2)


# ---------------------------------------------------------------------------------------------
# lstm

class LstmModel(nn.Module):
    def __init__(self, features: int = 32, hidden: int = 48, classes: int = 10) -> None:
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=2)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)          # [seq, batch, hidden]
        return self.head(out[-1])      # the last time step: [batch, classes]


# ---------------------------------------------------------------------------------------------
# unet_small

def double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU())


class UNetSmall(nn.Module):
    def __init__(self, cin: int = 3, classes: int = 2) -> None:
        super().__init__()
        self.enc1 = double_conv(cin, 8)                       # 32x32
        self.enc2 = double_conv(8, 16)                        # 16x16
        self.pool = nn.MaxPool2d(2)
        self.bottleneck = double_conv(16, 32)                 # 8x8
        self.up2 = nn.ConvTranspose2d(32, 16, kernel_size=2, stride=2)   # 8x8 -> 16x16
        self.dec2 = double_conv(16 + 16, 16)
        self.up1 = nn.Upsample(scale_factor=2, mode="nearest")           # 16x16 -> 32x32
        self.dec1 = double_conv(16 + 8, 8)
        self.out = nn.Conv2d(8, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s1 = self.enc1(x)
        s2 = self.enc2(self.pool(s1))
        b = self.bottleneck(self.pool(s2))
        d2 = self.dec2(torch.cat([self.up2(b), s2], dim=1))
        d1 = self.dec1(torch.cat([self.up1(d2), s1], dim=1))
        return self.out(d1)


# ---------------------------------------------------------------------------------------------

def build(name: str) -> tuple[nn.Module, torch.Tensor, str, str, torch.onnx.TrainingMode]:
    """The model with its seeded weights, an example input, the input and output names and the
    exporter's training mode."""
    torch.manual_seed(SEED)
    if name == "mobilenet_v2_mini":
        model = MobileNetV2Mini()
        randomize_batchnorm(model)
        example = torch.randn(1, 3, 64, 64)
        return model, example, "image", "logits", torch.onnx.TrainingMode.PRESERVE
    if name == "transformer_encoder":
        model = TransformerEncoderModel()
        randomize_layernorm(model)
        example = torch.randint(0, 100, (1, 16), dtype=torch.int64)
        return model, example, "tokens", "logits", torch.onnx.TrainingMode.EVAL
    if name == "encoder_layer":
        # one wider layer: large enough that the NPU's matrix products pay for their transfers
        model = TransformerEncoderModel(seq=64, d_model=192, layers=1)
        randomize_layernorm(model)
        example = torch.randint(0, 100, (1, 64), dtype=torch.int64)
        return model, example, "tokens", "logits", torch.onnx.TrainingMode.EVAL
    if name == "lstm":
        model = LstmModel()
        example = torch.randn(20, 1, 32)
        return model, example, "sequence", "logits", torch.onnx.TrainingMode.EVAL
    if name == "unet_small":
        model = UNetSmall()
        example = torch.randn(1, 3, 32, 32)
        return model, example, "image", "mask", torch.onnx.TrainingMode.EVAL
    raise KeyError(name)


MODELS = ("mobilenet_v2_mini", "transformer_encoder", "lstm", "unet_small", "encoder_layer")


def export(name: str) -> onnx.ModelProto:
    model, example, input_name, output_name, training = build(name)
    model.eval()
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # the TorchScript exporter's deprecation notice
        torch.onnx.export(model, (example,), buffer, dynamo=False, opset_version=OPSET,
                          do_constant_folding=True, training=training,
                          input_names=[input_name], output_names=[output_name])
    proto = onnx.load_from_string(buffer.getvalue())
    onnx.checker.check_model(proto, full_check=True)
    return proto


def main() -> None:
    # The fused fast path of nn.TransformerEncoderLayer is an inference kernel with no ONNX
    # export; the exporter must trace the layer's plain ops (MatMul, Softmax, LayerNorm, Erf).
    torch.backends.mha.set_fastpath_enabled(False)
    torch.set_num_threads(1)
    os.makedirs(MODELS_DIR, exist_ok=True)
    for name in MODELS:
        proto = export(name)
        path = os.path.join(MODELS_DIR, f"{name}.onnx")
        data = proto.SerializeToString(deterministic=True)
        with open(path, "wb") as f:
            f.write(data)
        histogram = collections.Counter(node.op_type for node in proto.graph.node)
        inputs = ", ".join(f"{i.name}{[d.dim_value for d in i.type.tensor_type.shape.dim]}"
                           for i in proto.graph.input)
        outputs = ", ".join(f"{o.name}{[d.dim_value for d in o.type.tensor_type.shape.dim]}"
                            for o in proto.graph.output)
        print(f"{name}: {len(data)} bytes, {inputs} -> {outputs}")
        print("  " + ", ".join(f"{op} {n}" for op, n in sorted(histogram.items())))


if __name__ == "__main__":
    main()
