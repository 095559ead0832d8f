"""The `glowsdk` command: a thin layer over the Python API.

Bad input ends with one line on stderr and exit code 2; a bug in glowsdk ends
with one line and exit code 1 (set GLOWSDK_DEBUG=1 for the traceback).
"""
from __future__ import annotations

import argparse
import ctypes
import importlib
import os
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

from ..errors import GlowError
from ..version import __version__

EXIT_BAD_INPUT = 2


@dataclass(frozen=True)
class Command:
    """A subcommand: the module of glowsdk.cli that adds its arguments and handler, and the line
    `glowsdk --help` lists. Only the module of the command being run is imported, so a command
    waits for what it uses and nothing else (`glowsdk scalesim` never imports the compiler)."""

    name: str
    module: str
    help: str

    def arguments(self) -> Callable[[argparse.ArgumentParser], None]:
        """The module's function that adds this command's arguments and sets its `func`."""
        return importlib.import_module(f"{__package__}.{self.module}").SUBCOMMANDS[self.name]


COMMANDS: tuple[Command, ...] = (
    Command("models", "listing", "list the bundled model names"),
    Command("backends", "listing", "list the installed backends"),
    Command("run", "run", "run a model on a target and summarise its outputs"),
    Command("compile", "compile", "optimise, lower and compile a model for a target"),
    Command("dump", "run", "print the imported graph as text or Graphviz DOT"),
    Command("conformance", "conformance", "run the primitive suite, the ONNX node tests and the model zoo on a "
                                          "target"),
    Command("profile", "quantize", "record the range of every value on calibration inputs (quantization)"),
    Command("partition", "partition_report", "show how a model splits between a target and the fallback device"),
    Command("quantize-report", "quantize", "compare a quantized model with float on held-out inputs"),
    Command("bench", "bench", "time a model on a target (latency, throughput, GFLOP/s), optionally against "
                              "onnxruntime"),
    Command("disasm", "npu", "print an NPU binary (.npub): header, tables, instructions as assembly"),
    Command("simulate", "npu", "run an NPU binary (.npub) on the cycle simulator and report its timing"),
    Command("scalesim", "scalesim", "run SCALE-Sim v3 inputs (.cfg, topology CSV) on glowsdk's "
                                    "SCALE-Sim-compatible model and write its report files"),
    Command("serve-bench", "serve", "serve a model on simulated NPUs and the CPU under load; report throughput, "
                                    "latency, utilisation and the partitions"),
    Command("sweep", "sweep", "compile and simulate models over a grid of NPU configurations (design-space "
                              "exploration), on this machine or a Ray cluster"),
    Command("train", "train", "train an ONNX model's weights with SGD and write the trained model"),
    Command("summary", "summary", "inputs, outputs, parameters, MACs and activations per layer, the op histogram "
                                  "and what each installed target runs"),
    Command("cache", "cache", "list, size or clear the compile cache ($GLOWSDK_CACHE_DIR, $XDG_CACHE_HOME/glowsdk "
                              "or ~/.cache/glowsdk)"),
)
"""Every subcommand, in the order `glowsdk --help` lists them."""


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's error style: one line, exit code 2, a pointer to --help."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The `glowsdk` parser. Given the command line `argv`, only the command it names gets its
    arguments (the others are listed by name and help); without, every command gets them."""
    parser = _Parser(prog="glowsdk", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"glowsdk {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    # the top level takes no option with a value, so the first word not starting with '-' is the command
    named = None if argv is None else next((word for word in argv if not word.startswith("-")), "")
    for command in COMMANDS:
        cmd = sub.add_parser(command.name, help=command.help, description=command.help)
        if named is None or named == command.name:
            command.arguments()(cmd)
    return parser


M_MMAP_THRESHOLD = -3
"""glibc's mallopt parameter: the size from which malloc maps a block of its own."""
LARGE_BLOCK = 1 << 20


def return_large_frees() -> None:
    """Have glibc's malloc give every block of LARGE_BLOCK or more its own mapping, so that freeing it gives the
    memory back. By default glibc raises that threshold after the first large free (up to 32 MiB), after which
    the weight copies a compile frees (folded filters, packed panels) stay resident: resnet50's cold `glowsdk run
    --target cpu` peaked at 551 MB, 495 MB with this. Kernels allocate nothing while running, so the run time is
    unchanged; elsewhere than glibc this does nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK)
    except (OSError, AttributeError):
        return


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return_large_frees()
    args = build_parser(argv).parse_args(argv)
    try:
        return args.func(args)
    except GlowError as err:
        print(f"glowsdk: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("glowsdk: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader (e.g. `| head`) went away: stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as err:
        if os.environ.get("GLOWSDK_DEBUG"):
            raise
        from ..backends.plugins import plugin_error  # reads the installed entry points: only on this path

        # raised inside a vendor's backend package: the plugin's bug, not ours
        blamed = plugin_error(err, getattr(args, "target", None))
        if blamed is not None:
            print(f"glowsdk: error: {blamed}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(f"glowsdk: internal error: {type(err).__name__}: {err} "
              f"(a bug in glowsdk; GLOWSDK_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
