"""Train the digits CNN in plain numpy and ship it as glowsdk/zoo/data/digits_cnn.onnx.

    python scripts/train_digits_cnn.py

The network is the one quantization is judged on (see glowsdk/zoo/digits.py):

    image [N,1,8,8] -> Conv 3x3 (1->8, pad 1) -> Relu -> MaxPool 2x2
                    -> Conv 3x3 (8->16, pad 1) -> Relu -> MaxPool 2x2
                    -> Flatten [N,64] -> Gemm (64->10) -> logits [N,10]

It is trained with softmax cross-entropy and Adam, forward and backward passes
written out here, so the repository needs no deep-learning framework. Every
random choice is seeded and the arithmetic is float32 on one thread, so the same
command on the same numpy build writes the same bytes; the JSON record carries
the sha256 that the tests check the shipped file against.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from threadpoolctl import threadpool_limits  # installed with scikit-learn

from glowsdk.zoo.digits import (MAX_PIXEL, SPLIT_SEED, TEST_SIZE, accuracy_percent,
                                digits_model_path, digits_record_path, load_digits_split)

INIT_SEED = 0      # weight initialisation and batch shuffling
EPOCHS = 40
BATCH = 32
LEARNING_RATE = 3e-3
OPSET = 17
IR_VERSION = 8     # the IR version that introduced opset 17; any onnxruntime >= 1.13 reads it

Params = dict[str, np.ndarray]


def init_params(rng: np.random.Generator) -> Params:
    """He-normal weights (the layers feed Relus), zero biases."""
    def he(shape: tuple[int, ...]) -> np.ndarray:
        fan_in = int(np.prod(shape[1:]))
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    return {"conv1_w": he((8, 1, 3, 3)), "conv1_b": np.zeros(8, np.float32),
            "conv2_w": he((16, 8, 3, 3)), "conv2_b": np.zeros(16, np.float32),
            "fc_w": he((10, 64)), "fc_b": np.zeros(10, np.float32)}


# --- layers: each forward returns its output and what its backward needs ---

def im2col(x: np.ndarray) -> np.ndarray:
    """[N,C,H,W] -> [N*H*W, C*9]: the 3x3 pad-1 windows, ordered (c, ky, kx) like the weights."""
    n, c, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    taps = np.stack([padded[:, :, ky:ky + h, kx:kx + w] for ky in range(3) for kx in range(3)], axis=2)
    return taps.transpose(0, 3, 4, 1, 2).reshape(n * h * w, c * 9)


def col2im(cols: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The adjoint of im2col: sum each window's gradient back onto the pixels it read."""
    n, c, h, w = shape
    taps = cols.reshape(n, h, w, c, 9).transpose(0, 3, 4, 1, 2)
    padded = np.zeros((n, c, h + 2, w + 2), cols.dtype)
    for k in range(9):
        ky, kx = divmod(k, 3)
        padded[:, :, ky:ky + h, kx:kx + w] += taps[:, :, k]
    return padded[:, :, 1:-1, 1:-1]


def conv_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, tuple]:
    n, _, h, wd = x.shape
    cols = im2col(x)
    out = cols @ w.reshape(w.shape[0], -1).T + b
    return out.reshape(n, h, wd, -1).transpose(0, 3, 1, 2), (cols, x.shape, w)


def conv_backward(grad: np.ndarray, cache: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    cols, x_shape, w = cache
    flat = grad.transpose(0, 2, 3, 1).reshape(-1, w.shape[0])
    dw = (flat.T @ cols).reshape(w.shape)
    dx = col2im(flat @ w.reshape(w.shape[0], -1), x_shape)
    return dx, dw, flat.sum(axis=0)


def _windows(x: np.ndarray) -> np.ndarray:
    """[N,C,H,W] -> [N,C,H/2,W/2,4]: the 2x2 stride-2 pooling windows."""
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h // 2, w // 2, 4)


def pool_forward(x: np.ndarray) -> tuple[np.ndarray, tuple]:
    windows = _windows(x)
    winner = windows.argmax(axis=-1)[..., None]
    return np.take_along_axis(windows, winner, axis=-1)[..., 0], (winner, x.shape)


def pool_backward(grad: np.ndarray, cache: tuple) -> np.ndarray:
    """Route each window's gradient to its one maximum, even when Relu zeros tie."""
    winner, (n, c, h, w) = cache
    windows = np.zeros((n, c, h // 2, w // 2, 4), grad.dtype)
    np.put_along_axis(windows, winner, grad[..., None], axis=-1)
    return windows.reshape(n, c, h // 2, w // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h, w)


def forward(p: Params, x: np.ndarray) -> tuple[np.ndarray, list]:
    a1, c1 = conv_forward(x, p["conv1_w"], p["conv1_b"])
    r1 = np.maximum(a1, 0)
    m1, q1 = pool_forward(r1)
    a2, c2 = conv_forward(m1, p["conv2_w"], p["conv2_b"])
    r2 = np.maximum(a2, 0)
    m2, q2 = pool_forward(r2)
    flat = m2.reshape(len(x), -1)  # (c, h, w) order, as ONNX Flatten
    logits = flat @ p["fc_w"].T + p["fc_b"]
    return logits, [c1, a1, q1, c2, a2, q2, flat, m2.shape]


def loss_and_grads(p: Params, x: np.ndarray, y: np.ndarray) -> tuple[float, Params]:
    """Mean softmax cross-entropy over the batch and its gradient for every parameter."""
    logits, (c1, a1, q1, c2, a2, q2, flat, m2_shape) = forward(p, x)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(len(y))
    loss = float(-log_probs[rows, y].mean())
    d_logits = np.exp(log_probs)
    d_logits[rows, y] -= 1
    d_logits /= len(y)
    g: Params = {"fc_w": d_logits.T @ flat, "fc_b": d_logits.sum(axis=0)}
    d_m2 = (d_logits @ p["fc_w"]).reshape(m2_shape)
    d_a2 = pool_backward(d_m2, q2) * (a2 > 0)
    d_m1, g["conv2_w"], g["conv2_b"] = conv_backward(d_a2, c2)
    d_a1 = pool_backward(d_m1, q1) * (a1 > 0)
    _, g["conv1_w"], g["conv1_b"] = conv_backward(d_a1, c1)
    return loss, g


def train(x: np.ndarray, y: np.ndarray) -> Params:
    """Adam (beta 0.9/0.999) over shuffled mini-batches, all seeded by INIT_SEED."""
    rng = np.random.default_rng(INIT_SEED)
    p = init_params(rng)
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(v) for k, v in p.items()}
    step = 0
    for epoch in range(EPOCHS):
        order = rng.permutation(len(x))
        total = 0.0
        for start in range(0, len(x), BATCH):
            batch = order[start:start + BATCH]
            loss, g = loss_and_grads(p, x[batch], y[batch])
            total += loss * len(batch)
            step += 1
            for k in p:
                m[k] = 0.9 * m[k] + 0.1 * g[k]
                v[k] = 0.999 * v[k] + 0.001 * g[k] * g[k]
                m_hat = m[k] / (1 - 0.9 ** step)
                v_hat = v[k] / (1 - 0.999 ** step)
                p[k] = p[k] - LEARNING_RATE * m_hat / (np.sqrt(v_hat) + 1e-8)
        print(f"epoch {epoch + 1:2d}: loss {total / len(x):.4f}")
    return p


def export(p: Params) -> onnx.ModelProto:
    """The trained network as an opset-17 ONNX model with a symbolic batch dimension N."""
    node = helper.make_node
    nodes = [
        node("Conv", ["image", "conv1_w", "conv1_b"], ["conv1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        node("Relu", ["conv1"], ["relu1"]),
        node("MaxPool", ["relu1"], ["pool1"], kernel_shape=[2, 2], strides=[2, 2]),
        node("Conv", ["pool1", "conv2_w", "conv2_b"], ["conv2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        node("Relu", ["conv2"], ["relu2"]),
        node("MaxPool", ["relu2"], ["pool2"], kernel_shape=[2, 2], strides=[2, 2]),
        node("Flatten", ["pool2"], ["flat"], axis=1),
        node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "digits_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(p[k], k) for k in sorted(p)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="glowsdk scripts/train_digits_cnn.py", ir_version=IR_VERSION)
    model.doc_string = (f"8x8 digits classifier; input pixels scaled by 1/{MAX_PIXEL:g} to [0, 1]; "
                        "output unnormalised logits per digit 0-9")
    onnx.checker.check_model(model, full_check=True)
    return model


def ort_correct(model_bytes: bytes, x: np.ndarray, y: np.ndarray) -> int:
    """How many images onnxruntime classifies right, running the exported bytes."""
    session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    logits = session.run(["logits"], {"image": x})[0]
    return int((logits.argmax(axis=1) == y).sum())


def main() -> None:
    x_train, y_train, x_test, y_test = load_digits_split()
    with threadpool_limits(limits=1):  # one BLAS thread: a thread split could change summation order
        params = train(x_train, y_train)
    model_bytes = export(params).SerializeToString()
    train_correct = ort_correct(model_bytes, x_train, y_train)
    test_correct = ort_correct(model_bytes, x_test, y_test)
    record = {
        "dataset": "sklearn.datasets.load_digits, pixels / 16",
        "split": {"function": "sklearn.model_selection.train_test_split", "test_size": TEST_SIZE,
                  "random_state": SPLIT_SEED, "stratify": "labels",
                  "train_images": len(x_train), "test_images": len(x_test)},
        "training": {"init_seed": INIT_SEED, "epochs": EPOCHS, "batch": BATCH, "optimizer": "adam",
                     "learning_rate": LEARNING_RATE},
        "train_correct": train_correct,
        "test_correct": test_correct,
        "train_accuracy": accuracy_percent(train_correct, len(y_train)),
        "test_accuracy": accuracy_percent(test_correct, len(y_test)),
        "sha256": hashlib.sha256(model_bytes).hexdigest(),
    }
    model_path = digits_model_path()
    model_path.parent.mkdir(parents=True, exist_ok=True)
    model_path.write_bytes(model_bytes)
    digits_record_path().write_text(json.dumps(record, indent=2) + "\n")
    print(f"train accuracy {record['train_accuracy']}%, test accuracy {record['test_accuracy']}%")
    print(f"wrote {model_path} (sha256 {record['sha256']})")


if __name__ == "__main__":
    main()
