"""The backend contract: what a vendor implements, and what the compiler calls (paper 3.4, 3.6).

A backend declares which primitives it runs (and on which element kinds); the
compiler lowers every other node onto them. It may keep a high-level node it
implements natively (`should_lower`), rewrite the lowered graph into
target-specific nodes (`transform_post_lowering`), and must compile a verified
function into something that executes, whose `execute` checks its inputs with
`glowsdk.graph.inputs.check_inputs`, as the reference evaluator does, so every target
refuses bad input alike. The contract lives here, with the compiler that calls it;
the built-in backends (glowsdk.backends) implement it one layer up.
Backends are discovered through the `glowsdk.backends` entry-point group
(glowsdk/backends/registry.py), so a vendor's separately installed package plugs
in without editing glowsdk.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Protocol

import numpy as np

from ..errors import UnsupportedError
from ..graph.function import Function
from ..graph.node import Node, Origin, Storage
from ..graph.types import ElemKind, Type
from .lowering.primitives import PRIMITIVES

if TYPE_CHECKING:
    from .ir.program import Program
    from .passes.manager import PassManager
    from .schedule import ScheduleReport


class QuantizationReport(Protocol):
    """What the pipeline's quantize step reports (glowsdk.quantization.QuantizationReport is the one glowsdk
    has): which nodes became integer and why the others stayed float, as a line and as JSON."""

    def summary(self) -> str: ...

    def to_json(self) -> dict: ...


@dataclass(frozen=True)
class TensorInfo:
    """A network input or output: its name and static type."""

    name: str
    type: Type

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape


@dataclass(frozen=True)
class DeviceInfo:
    """What the partitioner and the runtime need to know to place work on a device.

    The throughput figures feed the partitioner's cost model (vendor_guide/partial_chips.md): a
    partition's time is max(MACs / `macs_per_second`, bytes touched / `bytes_per_second`), plus
    `launch_seconds` per run and its border bytes over `link_bytes_per_second` to reach the host.
    The defaults describe a modest PCIe accelerator; a host backend sets the link to infinity.
    """

    memory_bytes: int
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    macs_per_second: float = 1e12
    bytes_per_second: float = 1e11
    link_bytes_per_second: float = 16e9
    launch_seconds: float = 10e-6


@dataclass
class CompileOptions:
    """Options every backend understands; `extra` carries backend-specific ones.

    `ir_passes` runs the IR optimiser of a backend that compiles through the
    low-level IR (`build_program`), so a caller can dump the IR after chosen passes.
    """

    extra: dict[str, Any] = field(default_factory=dict)
    ir_passes: PassManager | None = None
    release_constants: bool = False
    """Whether the compile may let go of the function's constant data once it holds its own (the pipeline
    sets it for the lowered copy it made, when no hook of the caller saw that copy): a backend that
    re-lays out the weights then holds one form of each at a time (`Module.release_constant_data`)."""


class FlagKind(Enum):
    """What a backend flag's value is; the CLI reads and checks it accordingly before the model loads."""

    TEXT = "text"
    COUNT = "count"
    """A whole number >= 1."""
    FILE = "file"
    """A file the backend writes: its folder must exist and be writable; the CLI prints it afterwards."""


@dataclass(frozen=True)
class Flag:
    """A command-line flag of a backend's own (`Backend.flags`): the `glowsdk` commands in `commands`
    accept it, and when compiling for this backend a given value reaches `compile` as the option
    `option` (`CompileOptions.extra`). The CLI reads the flags of every installed backend, so it names
    no target: a flag given for a target that does not declare it is refused in one line."""

    name: str
    """The spelling, `--dump-llvm`; the same on two backends is one flag (the first one's kind and help)."""
    option: str
    help: str
    kind: FlagKind = FlagKind.TEXT
    metavar: str | None = None
    commands: tuple[str, ...] = ("compile",)
    """Of run, compile, partition and bench."""
    check: Callable[[str], object] | None = None
    """Called with a given TEXT value before the model loads; raises GlowError if it is wrong."""


class CompiledFunction(ABC):
    """A function compiled for one backend, ready to execute."""

    def __init__(self, function: Function) -> None:
        self.inputs = [TensorInfo(p.name, p.type) for p in function.input_placeholders()]
        self.outputs = [TensorInfo(p.name, p.type) for p in function.output_placeholders()]
        self.schedule_report: ScheduleReport | None = None  # set by the compile pipeline
        self.quantization_report: QuantizationReport | None = None  # set by the pipeline when it quantizes
        self.program: Program | None = None  # set by backends that compile through the low-level IR
        self.origins: dict[str, Origin] = {n.name: n.origin for n in function.nodes if n.origin is not None}
        """Node name -> the model (ONNX) node it came from: reports name kernels and layers by it."""

    @abstractmethod
    def execute(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run on named input arrays; return the outputs by name."""

    def save(self, path: str) -> None:
        """Write the compiled artifact to one file (`compile -o`); a target without a file format refuses."""
        raise UnsupportedError(f"-o {path}: this target compiles to no file of its own")

    def report(self, page: bool, title: str) -> str:
        """`compile --report`: the compiled code layer by layer beside how it runs, as text or (`page`) a
        self-contained HTML page called `title`; a target without such a report refuses."""
        raise UnsupportedError("--report: this target has no compile report")

    def write_bundle(self, folder: str, source: str) -> list[str]:
        """`compile --bundle`: ahead-of-time code a C program links, written into `folder` (`source`
        names the model in it); the paths written. A target without bundles refuses."""
        raise UnsupportedError("--bundle: this target writes no bundles")

    def profile_kernels(self, inputs: Mapping[str, np.ndarray], runs: int) -> tuple[str, list[dict[str, Any]]]:
        """`bench --profile`: each kernel's time over `runs` runs on `inputs` of a function compiled with the
        `profile` option (`Backend.profiles_kernels`), as a table and one JSON record per kernel."""
        raise UnsupportedError("bench --profile: this target counts no cycles per kernel")


class Backend(ABC):
    """Base class of every backend, built-in or a vendor's.

    Subclasses set `name` and `primitives` (primitive kind name -> element kinds it
    runs, see `glowsdk.compiler.lowering.primitives.PRIMITIVES`) and implement
    `compile`. Everything else has a sensible default.
    """

    name: ClassVar[str]
    primitives: ClassVar[Mapping[str, frozenset[ElemKind]]] = {}
    requires_quantization: ClassVar[bool] = False
    """True for a device that computes in integers only: the CLI then quantizes even without a profile."""
    compile_cache: ClassVar[bool] = False
    """True for a backend that takes the `cache` option (a compile cache): the CLI turns it on unless --no-cache."""
    compile_options: CompileOptions = CompileOptions()
    """The options of the compile under way, set before lowering: `should_lower`, `is_op_supported` and
    `transform_post_lowering` may read `self.compile_options.extra` (an instance serves one compile at a time)."""
    options: ClassVar[Mapping[str, str] | None] = None
    """The `CompileOptions.extra` keys this backend takes, each with a one-line description
    (`--backend-opt key=value`); None leaves the checking to `compile`."""
    flags: ClassVar[tuple[Flag, ...]] = ()
    """Command-line flags of this backend's own, each setting one of its options (`Flag`)."""
    profiles_kernels: ClassVar[bool] = False
    """True for a backend that takes the `profile` option, compiling cycle counters into each kernel that
    `CompiledFunction.profile_kernels` reads (`glowsdk bench --profile`)."""

    def check_options(self, extra: Mapping[str, Any]) -> None:
        """Refuse, in one line, option keys this backend does not take (before any work is done)."""
        if self.options is None:
            return
        unknown = sorted(set(extra) - set(self.options))
        if unknown:
            takes = "; ".join(f"{k}: {doc}" for k, doc in self.options.items()) or "none"
            raise UnsupportedError(f"target '{self.name}' takes no option {', '.join(unknown)} "
                                   f"(its options: {takes})")

    def is_op_supported(self, node: Node) -> bool:
        """Whether this backend can execute `node` as it is after lowering.

        The default: a declared primitive, in canonical form, whose operands and
        used results (a MaxPool's unused indices do not count) all have element
        kinds this backend declared for it.
        """
        elems = self.primitives.get(node.kind)
        primitive = PRIMITIVES.get(node.kind)
        if elems is None or primitive is None or not primitive.accepts(node):
            return False
        used = {v.index for user in node.users for v in user.present_inputs() if v.node is node}
        kinds = [t.elem for i, t in enumerate(node.types) if i in used or len(node.types) == 1]
        kinds += [v.type.elem for v in node.present_inputs()]
        return all(kind in elems for kind in kinds)

    def unsupported_reason(self, node: Node) -> str | None:
        """Why `node` is not supported, when it is a limit of the device (`Conv 'stem': kernel 80 > 15`);
        None when the op or its element kinds are simply not declared."""
        return None

    def should_lower(self, node: Node) -> bool:
        """Whether the compiler should lower `node`; return False to receive it as it is.

        Consulted for high-level nodes (kinds with a lowering rule) and for primitives this backend
        does not support that have an alternative lowering onto primitives it declares (a Conv as
        patch extraction + MatMul); refusing one keeps it as it is, for a fallback device or to be
        reported unsupported.
        """
        return True

    def transform_post_lowering(self, function: Function) -> bool:
        """Rewrite the lowered function into target-specific nodes; return whether it changed."""
        return False

    def device_info(self) -> DeviceInfo:
        """Memory and capabilities, for the runtime's partitioner and provisioner."""
        return DeviceInfo(memory_bytes=0, description=self.name)

    @abstractmethod
    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        """Compile a verified, lowered, scheduled function for this backend."""

    def load_compiled(self, function: Function, options: CompileOptions) -> CompiledFunction | None:
        """A compile of the imported `function` with `options` that this backend kept from an earlier one
        (`keep_compiled`, e.g. in a compile cache), or None: the default keeps none.

        The pipeline asks before it optimises or lowers, and only where nothing in between could differ (its
        default passes, no stage hooks, instrumentation or quantization), so a hit costs neither that work nor
        the memory of the optimised graph's folded weights."""
        return None

    def keep_compiled(self, function: Function, options: CompileOptions, compiled: CompiledFunction) -> None:
        """Told, where `load_compiled` was asked and missed, that the imported `function` compiled with `options`
        entirely on this backend to `compiled`; the default forgets it."""


def unsupported_nodes(function: Function, backend: Backend) -> list[Node]:
    """The nodes `backend` cannot run (storage and Save are structural, always fine)."""
    return [n for n in function.nodes
            if n.kind != "Save" and not isinstance(n, Storage) and not backend.is_op_supported(n)]
