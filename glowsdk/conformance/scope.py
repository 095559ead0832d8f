"""The in-scope ONNX op list that glowsdk promises to import (the foundation issue's list)."""
from __future__ import annotations

_REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]

IN_SCOPE_OPS: frozenset[str] = frozenset("""
Conv ConvTranspose BatchNormalization InstanceNormalization LayerNormalization GroupNormalization
RMSNormalization LRN MaxPool AveragePool GlobalAveragePool GlobalMaxPool Gemm MatMul Einsum Relu
LeakyRelu PRelu Elu Selu Celu Sigmoid HardSigmoid HardSwish Tanh Softplus Softsign Mish Gelu Erf
ThresholdedRelu Softmax LogSoftmax Clip Dropout Identity Flatten Reshape Transpose Squeeze Unsqueeze
Concat Split Slice Pad Gather GatherElements Tile Expand Resize Upsample DepthToSpace SpaceToDepth
Where Cast CastLike Shape Size Constant ConstantOfShape Range Trilu CumSum TopK ArgMax ArgMin Add Sub
Mul Div Pow Mod Neg Abs Sqrt Reciprocal Exp Log Floor Ceil Round Sign Sin Cos Max Min Sum Mean Equal
Less LessOrEqual Greater GreaterOrEqual Not And Or Xor IsNaN IsInf LSTM GRU RNN QuantizeLinear
DequantizeLinear QLinearConv QLinearMatMul MatMulInteger ConvInteger
""".split() + _REDUCE)
