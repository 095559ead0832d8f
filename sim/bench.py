"""A ResNet-50-shaped NPU program, and how fast the simulator runs it (`python -m sim.bench`).

The program is what a straightforward compiler would emit for ResNet-50 int8 at 224 x 224: each
convolution tiled over output rows and output channels to fit the SRAMs, double-buffered with
semaphores so the load engine fills one buffer while the matrix engine works on the other, bias
added and requantized by the vector engine, stored back; max pooling, residual additions,
global average pooling and the classifier likewise; a NOP barrier between layers. It exercises
every engine with realistic sizes and gives the simulator's speed in instructions per second.
"""
from __future__ import annotations

import argparse
import time

from isa.config import ArchConfig, resolve_config
from isa.encoding import Instr, make_instr
from isa.sections import DebugRange

from .simulator import simulate

# Semaphores: s1/s2 input buffer full/free, s3/s4 accumulator full/free, s5/s6 output buffer full/free,
# s7 weights loaded, s8 weights and bias free (matrix and vector both let go), s9 layer stored.
IN_FULL, IN_FREE, ACC_FULL, ACC_FREE, OUT_FULL, OUT_FREE, WGT_FULL, WGT_FREE, STORED = range(1, 10)


class _Emitter:
    """Appends instructions and debug ranges; allocates DRAM; keeps the DMA registers to skip redundant configs."""

    def __init__(self, config: ArchConfig, tile_pixels: int) -> None:
        self.config = config
        self.tile_pixels = tile_pixels
        self.program: list[Instr] = []
        self.layers: list[DebugRange] = []
        self.dram_top = 0
        spad, words = config.scratchpad_bytes, config.accumulator_bytes // 4
        self.wbuf, self.wbuf_size = 0, spad // 2
        self.ibuf = (spad // 2, spad // 2 + spad // 8)
        self.ibuf_size = spad // 8
        self.obuf = (3 * spad // 4, 3 * spad // 4 + spad // 16)
        self.obuf_size = spad // 16
        self.bias = words - 2048
        self.abuf_size = (words - 2048) // 2
        self.abuf = (0, self.abuf_size)
        self.tile = 0
        self.load_regs: dict | None = None
        self.pad_regs: dict | None = None
        self.store_regs: dict | None = None
        for sem, count in ((IN_FREE, 2), (ACC_FREE, 2), (OUT_FREE, 2), (WGT_FREE, 2)):
            self.emit("NOP", signal_sem=sem, signal_count=count)

    def emit(self, mnemonic: str, **fields) -> None:
        self.program.append(make_instr(mnemonic, **fields))

    def alloc(self, size: int) -> int:
        at = self.dram_top
        self.dram_top += -(-size // 64) * 64
        return at

    def _config(self, which: str, mnemonic: str, **regs) -> None:
        if getattr(self, which) != regs:
            setattr(self, which, regs)
            self.emit(mnemonic, **regs)

    def load(self, dram: int, space: str, sram: int, rows: int, cols: int, row_stride: int, elem: int,
             pads: tuple[int, int, int, int] = (0, 0, 0, 0), **sync) -> None:
        self._config("load_regs", "CONFIG_LOAD", row_stride=row_stride, plane_stride=0, col_stride=elem,
                     elem_bytes=elem)
        top, bottom, left, right = pads
        self._config("pad_regs", "CONFIG_PAD", pad_top=top, pad_bottom=bottom, pad_left=left, pad_right=right,
                     pad_value=0)
        self.emit("LOAD", dram=dram, space=space, sram=sram, planes=1, rows=rows, cols=cols, **sync)

    def store(self, dram: int, sram: int, rows: int, row_stride: int, elem: int, space: str = "spad",
              **sync) -> None:
        self._config("store_regs", "CONFIG_STORE", row_stride=row_stride, plane_stride=0, col_stride=0,
                     elem_bytes=elem)
        self.emit("STORE", dram=dram, space=space, sram=sram, planes=1, rows=rows, cols=1, **sync)

    def layer(self, name: str, kind: str, start: int) -> None:
        """Close a layer: a store-engine config after its last STORE signals STORED, a NOP barrier waits for it."""
        self.emit("CONFIG_STORE", **self.store_regs, signal_sem=STORED, signal_count=1)
        self.emit("NOP", wait_sem=STORED, wait_count=1)
        self.layers.append(DebugRange(start, len(self.program), name, kind))

    def conv(self, name: str, src: int, h: int, w: int, cin: int, n: int, k: int, stride: int) -> tuple[int, int, int]:
        """A k x k convolution with 'same' padding, bias and requantize; returns (dst, out_h, out_w)."""
        pad = k // 2
        oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        kk = k * k * cin
        weights, bias, dst = self.alloc(kk * n), self.alloc(4 * n), self.alloc(oh * ow * n)
        cols = self.config.array_cols
        # Output channels per tile: the weights must fit their buffer and one output row the accumulator.
        n_tile = min(n, self.wbuf_size // kk, min(self.abuf_size, self.obuf_size) // ow)
        if n_tile < n:
            n_tile = max(cols, n_tile // cols * cols)
        pitch = (w + 2 * pad) * cin
        rows = max(1, min(self.abuf_size // (ow * n_tile), self.obuf_size // (ow * n_tile),
                          ((self.ibuf_size // pitch) - k) // stride + 1, oh, max(1, self.tile_pixels // ow)))
        start = len(self.program)
        self.emit("CONFIG_REQUANT", multiplier=1 << 30, shift=6, zero_point=0, clamp_lo=0, clamp_hi=127,
                  per_channel=0, table=0, bias_row=0, bias=0)
        for n0 in range(0, n, n_tile):
            nt = min(n_tile, n - n0)
            self.load(weights + n0, "spad", self.wbuf, kk, 1, n, nt, wait_sem=WGT_FREE, wait_count=2)
            self.load(bias + 4 * n0, "acc", self.bias, 1, 1, 0, 4 * nt, signal_sem=WGT_FULL, signal_count=1)
            self.emit("CONFIG_MATMUL", dataflow="ws", im2col=1, out_w=ow, channels=cin, kw=k, stride_h=stride,
                      stride_w=stride, dil_h=1, dil_w=1, row_pitch=pitch, pixel_pitch=cin, wait_sem=WGT_FULL,
                      wait_count=1)
            tiles = range(0, oh, rows)
            for oy0 in tiles:
                r = min(rows, oh - oy0)
                iy0, iy1 = oy0 * stride - pad, (oy0 + r - 1) * stride - pad + k - 1
                top, bottom = max(0, -iy0), max(0, iy1 - (h - 1))
                b = self.tile % 2
                self.tile += 1
                self.load(src + max(0, iy0) * w * cin, "spad", self.ibuf[b], iy1 - iy0 + 1 - top - bottom, w,
                          w * cin, cin, (top, bottom, pad, pad), wait_sem=IN_FREE, wait_count=1,
                          signal_sem=IN_FULL, signal_count=1)
                last = oy0 == tiles[-1]
                self.emit("CONFIG_MATMUL", dataflow="ws", im2col=1, out_w=ow, channels=cin, kw=k, stride_h=stride,
                          stride_w=stride, dil_h=1, dil_w=1, row_pitch=pitch, pixel_pitch=cin, wait_sem=ACC_FREE,
                          wait_count=1)
                self.emit("MATMUL", inp=self.ibuf[b], wgt=self.wbuf, acc=self.abuf[b], rows=r * ow, k=kk, n=nt,
                          acc_mode=0, wait_sem=IN_FULL, wait_count=1, signal_sem=IN_FREE, signal_count=1)
                for sem in (ACC_FULL, WGT_FREE) if last else (ACC_FULL,):
                    self.emit("CONFIG_MATMUL", dataflow="ws", im2col=1, out_w=ow, channels=cin, kw=k,
                              stride_h=stride, stride_w=stride, dil_h=1, dil_w=1, row_pitch=pitch, pixel_pitch=cin,
                              signal_sem=sem, signal_count=1)
                self.emit("VADD", dst_space="acc", dst=self.abuf[b], src1_space="acc", src1=self.abuf[b],
                          src2_space="acc", src2=self.bias, rows=r * ow, cols=nt, bcast=1, wait_sem=ACC_FULL,
                          wait_count=1, **({"signal_sem": WGT_FREE, "signal_count": 1} if last else {}))
                self.emit("CONFIG_CLAMP", lo=-(1 << 31), hi=(1 << 31) - 1, wait_sem=OUT_FREE, wait_count=1)
                self.emit("REQUANT", dst=self.obuf[b], src=self.abuf[b], rows=r * ow, cols=nt, signal_sem=ACC_FREE,
                          signal_count=1)
                self.emit("CONFIG_CLAMP", lo=-(1 << 31), hi=(1 << 31) - 1, signal_sem=OUT_FULL, signal_count=1)
                self.store(dst + oy0 * ow * n + n0, self.obuf[b], r * ow, n, nt, wait_sem=OUT_FULL, wait_count=1,
                           signal_sem=OUT_FREE, signal_count=1)
        self.layer(name, "Conv", start)
        return dst, oh, ow

    def _tiles(self, rows: int, rows_per_tile: int, body) -> None:
        """Run `body(first_row, count, buffer)` per tile of output rows, alternating the double buffers."""
        for r0 in range(0, rows, rows_per_tile):
            b = self.tile % 2
            self.tile += 1
            body(r0, min(rows_per_tile, rows - r0), b)

    def maxpool(self, name: str, src: int, h: int, w: int, c: int) -> tuple[int, int, int]:
        """3 x 3 stride-2 max pooling with one row and column of padding before; returns (dst, out_h, out_w)."""
        oh, ow = (h + 1 - 3) // 2 + 1, (w + 1 - 3) // 2 + 1
        dst = self.alloc(oh * ow * c)
        rows = max(1, min((self.ibuf_size // (w * c) - 3) // 2 + 1, self.obuf_size // (ow * c),
                          self.tile_pixels // ow))
        start = len(self.program)

        def tile(oy0: int, r: int, b: int) -> None:
            iy0 = max(0, oy0 * 2 - 1)
            iy1 = min(h - 1, (oy0 + r - 1) * 2 + 1)
            top = 1 if oy0 == 0 else 0
            self.load(src + iy0 * w * c, "spad", self.ibuf[b], iy1 - iy0 + 1, 1, w * c, w * c,
                      wait_sem=IN_FREE, wait_count=1, signal_sem=IN_FULL, signal_count=1)
            self.emit("CONFIG_POOL", kh=3, kw=3, stride_h=2, stride_w=2, pad_top=top, pad_bottom=0, pad_left=1,
                      pad_right=0, count_pad=0, pad_value=0, wait_sem=OUT_FREE, wait_count=1)
            self.emit("POOL", op="max", dst=self.obuf[b], src=self.ibuf[b], height=iy1 - iy0 + 1, width=w, channels=c,
                      wait_sem=IN_FULL, wait_count=1, signal_sem=IN_FREE, signal_count=1)
            self.emit("CONFIG_CLAMP", lo=-(1 << 31), hi=(1 << 31) - 1, signal_sem=OUT_FULL, signal_count=1)
            self.store(dst + oy0 * ow * c, self.obuf[b], 1, 0, r * ow * c, wait_sem=OUT_FULL, wait_count=1,
                       signal_sem=OUT_FREE, signal_count=1)

        self._tiles(oh, rows, tile)
        self.layer(name, "MaxPool", start)
        return dst, oh, ow

    def add(self, name: str, a: int, b_src: int, size: int) -> int:
        """Residual addition of two int8 tensors of `size` bytes (saturating), tiled; returns dst."""
        dst = self.alloc(size)
        chunk = min(self.ibuf_size // 2, self.obuf_size, self.tile_pixels * 64)
        start = len(self.program)

        def tile(at: int, count: int, b: int) -> None:
            self.load(a + at, "spad", self.ibuf[b], 1, 1, 0, count, wait_sem=IN_FREE, wait_count=1)
            self.load(b_src + at, "spad", self.ibuf[b] + chunk, 1, 1, 0, count, signal_sem=IN_FULL, signal_count=1)
            self.emit("CONFIG_CLAMP", lo=-(1 << 31), hi=(1 << 31) - 1, wait_sem=OUT_FREE, wait_count=1)
            self.emit("VADD", dst_space="spad", dst=self.obuf[b], src1_space="spad", src1=self.ibuf[b],
                      src2_space="spad", src2=self.ibuf[b] + chunk, rows=1, cols=count, bcast=0, wait_sem=IN_FULL,
                      wait_count=1, signal_sem=IN_FREE, signal_count=1)
            self.emit("CONFIG_CLAMP", lo=-(1 << 31), hi=(1 << 31) - 1, signal_sem=OUT_FULL, signal_count=1)
            self.store(dst + at, self.obuf[b], 1, 0, count, wait_sem=OUT_FULL, wait_count=1, signal_sem=OUT_FREE,
                       signal_count=1)

        self._tiles(size, chunk, tile)
        self.layer(name, "Add", start)
        return dst

    def head(self, src: int, pixels: int, c: int, classes: int) -> None:
        """Global average pooling (REDUCE, REQUANT) and the classifier (an output-stationary MATMUL)."""
        start = len(self.program)
        weights, out = self.alloc(c * classes), self.alloc(4 * classes)
        self.load(src, "spad", self.ibuf[0], pixels, 1, c, c, wait_sem=IN_FREE, wait_count=1,
                  signal_sem=IN_FULL, signal_count=1)
        self.emit("REDUCE", op="sum", accumulate=0, dst=self.abuf[0], src_space="spad", src=self.ibuf[0],
                  rows=pixels, cols=c, wait_sem=IN_FULL, wait_count=1)
        self.emit("CONFIG_REQUANT", multiplier=1 << 30, shift=5, zero_point=0, clamp_lo=-128, clamp_hi=127,
                  per_channel=0, table=0, bias_row=0, bias=0)
        self.emit("REQUANT", dst=self.obuf[0], src=self.abuf[0], rows=1, cols=c, signal_sem=OUT_FULL, signal_count=1)
        self.emit("CONFIG_MATMUL", dataflow="os", im2col=0, out_w=1, channels=1, kw=1, stride_h=1, stride_w=1,
                  dil_h=1, dil_w=1, row_pitch=0, pixel_pitch=0)
        # The pooled vector is in the scratchpad. Not on IN_FULL: this wait could then take the LOAD's token
        # before the REDUCE's wait does (checked mode calls that a race).
        self.emit("NOP", wait_sem=OUT_FULL, wait_count=1)
        n_tile = max(1, self.wbuf_size // c // 8 * 8)
        for n0 in range(0, classes, n_tile):
            nt = min(n_tile, classes - n0)
            last = n0 + n_tile >= classes
            self.load(weights + n0, "spad", self.wbuf, c, 1, classes, nt, wait_sem=WGT_FREE, wait_count=2,
                      signal_sem=WGT_FULL, signal_count=1)
            self.emit("MATMUL", inp=self.obuf[0], wgt=self.wbuf, acc=self.abuf[1] + n0, rows=1, k=c, n=nt, acc_mode=0,
                      wait_sem=WGT_FULL, wait_count=1, signal_sem=ACC_FULL if last else WGT_FREE,
                      signal_count=1 if last else 2)
        self.store(out, self.abuf[1], 1, 0, 4 * classes, space="acc", wait_sem=ACC_FULL, wait_count=1,
                   signal_sem=STORED, signal_count=1)
        self.emit("NOP", wait_sem=STORED, wait_count=1)
        self.layers.append(DebugRange(start, len(self.program), "fc", "Gemm"))


def resnet50_program(config: ArchConfig, tile_pixels: int = 1 << 16) -> tuple[list[Instr], list[DebugRange], int]:
    """(instructions, debug ranges, DRAM bytes used) of a ResNet-50-shaped int8 network at 224 x 224.

    Tiles hold at most `tile_pixels` output pixels (and whatever fits the SRAMs): smaller tiles, more
    instructions.
    """
    e = _Emitter(config, tile_pixels)
    image = e.alloc(224 * 224 * 3)
    x, h, w = e.conv("conv1", image, 224, 224, 3, 64, 7, 2)
    x, h, w = e.maxpool("pool1", x, h, w, 64)
    channels = 64
    for stage, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3)), start=1):
        for block in range(blocks):
            stride = 2 if block == 0 and stage > 1 else 1
            name = f"layer{stage}.{block}"
            y, _, _ = e.conv(f"{name}.conv1", x, h, w, channels, width, 1, 1)
            y, oh, ow = e.conv(f"{name}.conv2", y, h, w, width, width, 3, stride)
            y, _, _ = e.conv(f"{name}.conv3", y, oh, ow, width, 4 * width, 1, 1)
            shortcut = x
            if block == 0:
                shortcut, _, _ = e.conv(f"{name}.downsample", x, h, w, channels, 4 * width, 1, stride)
            x, h, w, channels = e.add(f"{name}.add", y, shortcut, oh * ow * 4 * width), oh, ow, 4 * width
    e.head(x, h * w, channels, 1000)
    e.emit("END")
    return e.program, e.layers, e.dram_top


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="default", help="preset or configuration file (default: default)")
    parser.add_argument("--checked", action="store_true", help="also detect races")
    parser.add_argument("--tile-pixels", type=int, default=14,
                        help="output pixels per tile at most (default 14: about 55,000 instructions)")
    args = parser.parse_args()
    config = resolve_config(args.config)
    began = time.perf_counter()
    program, layers, dram = resnet50_program(config, args.tile_pixels)
    built = time.perf_counter() - began
    result = simulate(program, config, layers=layers, checked=args.checked)
    print(f"{len(program)} instructions ({len(layers)} layers, {dram / 2**20:.1f} MiB of DRAM) built in {built:.1f} s")
    print(f"simulated in {result.wall_seconds:.1f} s: {len(program) / result.wall_seconds:,.0f} instructions/s, "
          f"{result.cycles:,} cycles ({result.seconds * 1e3:.2f} ms at {config.clock_ghz:g} GHz)")


if __name__ == "__main__":
    main()
