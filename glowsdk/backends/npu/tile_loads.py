"""How a convolution tile's input reaches the scratchpad: a DRAM image's layout (`Image`) and the DMA programs
that load a tile's rows with their halo, the padding written with the zero point (whole, in streamed row chunks, or
several batch images stacked one above another)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from .instructions import CONFIG_LOAD, CONFIG_PAD, LOAD, MATMUL, Op
from .pipeline import Step
from .step_cost import ConvShape
from .tensors import DramTensor


@dataclass(frozen=True)
class Image:
    """A DRAM tensor seen as batch x rows x pixels x channels, channels contiguous."""

    tensor: DramTensor
    batch: int
    batch_stride: int
    row_stride: int
    pixel_stride: int

    @staticmethod
    def of(tensor: DramTensor) -> Image:
        if len(tensor.shape) == 4:  # N, C, H, W stored NHWC
            return Image(tensor, tensor.shape[0], tensor.strides[0], tensor.strides[2], tensor.strides[3])
        rows, cols = tensor.shape  # an M x K matrix: M rows of one K-channel pixel
        return Image(tensor, 1, 0, tensor.strides[0], cols)


def input_loads(s: ConvShape, src: Image, x_zero: int, dram: int, oy0: int, oy1: int, c: int,
                sram: int) -> list[Op]:
    """Load the input rows of output rows oy0..oy1 (with their halo, c channels at `dram`) into a dense
    rows x padded width x c image at `sram`, the padding written with the zero point."""
    first = oy0 * s.stride[0] - s.pads[0]
    last = first + s.in_rows(oy1 - oy0) - 1
    y0, y1 = max(first, 0), min(last, s.height - 1)
    pad = dict(pad_top=y0 - first, pad_bottom=last - y1, pad_left=s.pads[1], pad_right=s.pads[3], pad_value=x_zero)
    return [CONFIG_LOAD(row_stride=src.row_stride, plane_stride=0, col_stride=src.pixel_stride,
                        elem_bytes=c),
            CONFIG_PAD(**pad),
            load(dram + y0 * src.row_stride, "spad", sram, y1 - y0 + 1, s.width),
            CONFIG_PAD(pad_top=0, pad_bottom=0, pad_left=0, pad_right=0, pad_value=0)]


def streamed_step(s: ConvShape, src: Image, x_zero: int, dram: int, oy0: int, c: int, sram: int,
                  chunks: list[tuple[int, int]], weights: list[Op], product: Op, config: Op,
                  early: tuple[int, int] | None, shared: bool, ahead: int | None = None) -> Step:
    """A tile's first step with its input loaded in row chunks (after the first, its weight block), each chunk's
    rows computed by a MATMUL of their own that waits only for the loads up to it: the array starts once the first
    chunk is in. A chunk whose window adds no image row (padding only) joins the one before. With `shared`, the
    input is the row tile's that later steps read too (Step.shared). With `ahead`, the layer before loaded the first
    chunk's rows there (prefetch.py; `early` waits for them): its product reads them there, and the next chunk
    loads its window's rows from its own first (the halo they share again)."""
    pitch, first = s.padded_width * c, oy0 * s.stride[0] - s.pads[0]
    loads: list[Op] = []
    parts: list[int] = []
    products: list[Op] = []
    top = pad = 0
    for a, b in chunks:
        bottom = s.in_rows(b)  # padded input rows [top, bottom) of the tile are this chunk's to load
        lo, hi = first + top, first + bottom - 1
        y0, y1 = max(lo, 0), min(hi, s.height - 1)
        rows = MATMUL(inp=sram + a * s.stride[0] * pitch, wgt=product.fields["wgt"],
                      acc=product.fields["acc"] + a * s.out_width * product.fields["n"],
                      rows=(b - a) * s.out_width, k=product.fields["k"], n=product.fields["n"], acc_mode=0)
        if ahead is not None and not products:  # loaded by the layer before, read where it lies
            parts.append(0)
            products.append(replace(rows, fields={**rows.fields, "inp": ahead}))
            top = b * s.stride[0] if len(chunks) > 1 else bottom
            continue
        if y1 < y0 and ahead is not None and len(products) == 1:
            raise AssertionError("a streamed step whose first chunk was prefetched has image rows in its second")
        if y1 < y0:  # padding only: computed by the chunk before's product, which waits for it
            products[-1] = replace(products[-1], fields={**products[-1].fields,
                                                        "rows": products[-1].fields["rows"] + rows.fields["rows"]})
            loads[pad] = replace(loads[pad], fields={**loads[pad].fields,
                                                     "pad_bottom": loads[pad].fields["pad_bottom"] + bottom - top})
            top = bottom
            continue
        pad = len(loads) + 1
        loads += [CONFIG_LOAD(row_stride=src.row_stride, plane_stride=0, col_stride=src.pixel_stride, elem_bytes=c),
                  CONFIG_PAD(pad_top=y0 - lo, pad_bottom=hi - y1, pad_left=s.pads[1], pad_right=s.pads[3],
                             pad_value=x_zero),
                  load(dram + y0 * src.row_stride, "spad", sram + top * pitch, y1 - y0 + 1, s.width)]
        parts.append(1)
        products.append(rows)
        if len(products) == 1 and weights:
            loads += [CONFIG_PAD(pad_top=0, pad_bottom=0, pad_left=0, pad_right=0, pad_value=0), *weights]
            parts[0] += sum(op.mnemonic == "LOAD" for op in weights)
        top = bottom
    loads.append(CONFIG_PAD(pad_top=0, pad_bottom=0, pad_left=0, pad_right=0, pad_value=0))
    return Step([] if shared else loads, [config, *products], matrix_wait=early, shared=loads if shared else [],
                parts=tuple(parts))


def stacked_loads(s: ConvShape, src: Image, x_zero: int, dram: int, images: int, c: int, sram: int) -> list[Op]:
    """Load `images` consecutive images (c channels at `dram`) one above another at `sram`, each with the zero
    point's padding above and below it that makes it one period of the stack (ConvShape.stack_period): one
    LOAD of a plane per image, and one more for the last image when its window reaches below the period."""
    period = s.stack_period()
    bottom = s.in_rows(s.out_height) - s.pads[0] - s.height
    whole = images if bottom <= period - s.pads[0] - s.height else images - 1
    ops = [CONFIG_LOAD(row_stride=src.row_stride, plane_stride=src.batch_stride, col_stride=src.pixel_stride,
                       elem_bytes=c)]
    pads = dict(pad_left=s.pads[1], pad_right=s.pads[3], pad_value=x_zero)
    ops += [CONFIG_PAD(pad_top=s.pads[0], pad_bottom=period - s.pads[0] - s.height, **pads),
            LOAD(dram=dram, space="spad", sram=sram, planes=whole, rows=s.height, cols=s.width)]
    if whole < images:
        ops += [CONFIG_PAD(pad_top=s.pads[0], pad_bottom=bottom, **pads),
                LOAD(dram=dram + whole * src.batch_stride, space="spad",
                     sram=sram + whole * period * s.padded_width * c, planes=1, rows=s.height, cols=s.width)]
    return ops + [CONFIG_PAD(pad_top=0, pad_bottom=0, pad_left=0, pad_right=0, pad_value=0)]


def config_load(row_stride: int, col_stride: int, elem_bytes: int) -> Op:
    return CONFIG_LOAD(row_stride=row_stride, plane_stride=0, col_stride=col_stride, elem_bytes=elem_bytes)


def load(dram: int, space: str, sram: int, rows: int, cols: int) -> Op:
    return LOAD(dram=dram, space=space, sram=sram, planes=1, rows=rows, cols=cols)
