"""Static memory allocation: every buffer of an IR function gets a byte offset (paper 3.5, 5.3).

After the IR optimiser has shrunk activation lifetimes, the whole network's
mutable memory is one region: each activation (an `allocactivation`) gets an
offset in it, and two activations may share bytes when their lifetimes do not
intersect. A lifetime is the closed program interval from the alloc to its
dealloc (the end of the program when there is none); tensorviews are windows
into their base buffer and never get space of their own. Weights are packed one
after the other: constants in a constant region, input and output placeholders
in a placeholder region. Every offset and size is a multiple of `alignment`.

Placing intervals of given sizes in as little memory as possible is NP-hard
(dynamic storage allocation), so `allocate` runs a few greedy placements and
keeps the smallest: buffers are taken in one of several orders (largest first,
earliest first, largest size x duration first, or the buffers live at the
busiest program points first), and each lands in the best-fitting (or the
lowest) gap left by the already placed buffers whose lifetimes intersect its
own; when none reaches the lower bound, a short seeded local search reorders the
buffers that decide the height (densenet's growing concatenations need it). The
report compares the result with the naive layout (no sharing) and with the lower
bound no placement can beat: the most bytes live at one program point.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Sequence

from .function import Instruction, IRFunction, Value, Weight, base_of, view_offset

MIB = 1 << 20


class PlanError(Exception):
    """A memory plan breaks an invariant: a bug in the allocator, or a program changed after allocation."""


@dataclass(frozen=True)
class MemoryReport:
    """How much mutable activation memory the plan needs, against no sharing and the lower bound."""

    naive_bytes: int
    allocated_bytes: int
    lower_bound_bytes: int

    def line(self) -> str:
        return (f"activations: naive {self.naive_bytes / MIB:.2f} MiB, "
                f"allocated {self.allocated_bytes / MIB:.2f} MiB, "
                f"lower bound {self.lower_bound_bytes / MIB:.2f} MiB")


@dataclass
class MemoryPlan:
    """Byte offsets of every buffer in its region; `strategy` names the placement that won."""

    alignment: int
    activation_offsets: dict[str, int]
    activation_bytes: int
    constant_offsets: dict[str, int]
    constant_bytes: int
    placeholder_offsets: dict[str, int]
    placeholder_bytes: int
    report: MemoryReport
    strategy: str

    def address(self, value: Value) -> tuple[str, int]:
        """The region ("activations", "constants" or "placeholders") and byte offset of `value`.

        A tensorview resolves to its base buffer's offset plus the view's offset.
        """
        base = base_of(value)
        if isinstance(base, Weight):
            region, offsets = (("constants", self.constant_offsets) if base.role == "constant"
                               else ("placeholders", self.placeholder_offsets))
        else:
            region, offsets = "activations", self.activation_offsets
        return region, offsets[base.name] + view_offset(value)

    def region_bytes(self, region: str) -> int:
        return {"activations": self.activation_bytes, "constants": self.constant_bytes,
                "placeholders": self.placeholder_bytes}[region]


@dataclass(frozen=True)
class Lifetime:
    """One activation: its aligned size and the closed program interval in which it is live."""

    name: str
    size: int
    start: int
    end: int


def aligned(nbytes: int, alignment: int) -> int:
    return -(-nbytes // alignment) * alignment


def lifetimes(function: IRFunction, alignment: int) -> list[Lifetime]:
    """The lifetime of every activation, in program order of the allocs."""
    ends = {id(i.operands[0]): index for index, i in enumerate(function.instructions)
            if i.kind == "DeallocActivation"}
    last = len(function.instructions)
    return [Lifetime(i.name, aligned(i.type.nbytes, alignment), index, ends.get(id(i), last))
            for index, i in enumerate(function.instructions) if i.kind == "AllocActivation"]


def _conflicts(buffers: Sequence[Lifetime]) -> list[list[int]]:
    """For each buffer, the buffers whose lifetimes intersect its own (a sweep over starts)."""
    conflicts: list[list[int]] = [[] for _ in buffers]
    active: list[int] = []
    for i in sorted(range(len(buffers)), key=lambda k: buffers[k].start):
        active = [j for j in active if buffers[j].end >= buffers[i].start]
        for j in active:
            conflicts[i].append(j)
            conflicts[j].append(i)
        active.append(i)
    return conflicts


def _fit(taken: list[tuple[int, int]], size: int, best_fit: bool) -> int:
    """The offset for `size` bytes among the sorted occupied ranges `taken`.

    Best fit takes the smallest gap that holds the buffer (the lowest such on ties),
    first fit the lowest; with no such gap the buffer goes above everything taken.
    """
    best: tuple[int, int] | None = None
    cursor = 0
    for lo, hi in taken:
        gap = lo - cursor
        if gap >= size:
            if not best_fit:
                return cursor
            if best is None or gap < best[0]:
                best = (gap, cursor)
        cursor = max(cursor, hi)
    return best[1] if best is not None else cursor


class Placer:
    """The activations of one program, with what every placement needs computed once."""

    def __init__(self, buffers: Sequence[Lifetime]) -> None:
        self.buffers = buffers
        self.conflicts = _conflicts(buffers)
        # The buffers live at each buffer's start: the peak of live bytes is at one of these points.
        self.live = [[i] + [j for j in self.conflicts[i] if buffers[j].start <= buffers[i].start]
                     for i in range(len(buffers))]
        self.loads = [sum(buffers[j].size for j in group) for group in self.live]
        # The most aligned bytes live at one program point: no placement needs less.
        self.bound = max(self.loads, default=0)

    def place(self, order: Sequence[int], best_fit: bool) -> list[int]:
        """Offsets from placing the buffers in `order`, each in a gap among its conflicts."""
        offsets = [-1] * len(self.buffers)
        for i in order:
            taken = sorted((offsets[j], offsets[j] + self.buffers[j].size) for j in self.conflicts[i]
                           if offsets[j] >= 0 and self.buffers[j].size)
            offsets[i] = _fit(taken, self.buffers[i].size, best_fit)
        return offsets

    def top(self, offsets: Sequence[int]) -> int:
        return max((o + b.size for o, b in zip(offsets, self.buffers)), default=0)

    def solve(self) -> tuple[list[int], str]:
        """Offsets from the best placement found, and how it was found.

        Every order of ORDERS is placed with best and with first fit. Unless the best
        of these reaches the bound, a local search then moves a few buffers of the
        winning order (among those reaching the top and those live with them) to
        other positions and keeps each order that places no higher, stopping at the
        bound (seeded, so the plan is deterministic).
        """
        if not self.buffers:
            return [], "empty"
        best: tuple[int, list[int], list[int], bool, str] | None = None
        for order_name, rule in ORDERS.items():
            order = rule(self)
            for best_fit in (True, False):
                offsets = self.place(order, best_fit)
                if best is None or self.top(offsets) < best[0]:
                    best = (self.top(offsets), offsets, order, best_fit,
                            f"{order_name}, {'best' if best_fit else 'first'} fit")
        top, offsets, order, best_fit, strategy = best
        rng = random.Random(0)
        rounds = min(SEARCH_ROUNDS, SEARCH_WORK // (len(self.buffers) + sum(map(len, self.conflicts))))
        for _ in range(rounds if top > self.bound else 0):
            candidate = self._perturbed(order, offsets, top, rng)
            placed = self.place(candidate, best_fit)
            if self.top(placed) <= top:
                if self.top(placed) < top:
                    strategy = strategy.split(", then")[0] + ", then local search"
                top, offsets, order = self.top(placed), placed, candidate
                if top == self.bound:
                    break
        return offsets, strategy

    def _perturbed(self, order: list[int], offsets: list[int], top: int, rng: random.Random) -> list[int]:
        """`order` with 1-4 of the buffers that decide the height moved: those reaching the top
        and those live with them."""
        highest = [i for i, b in enumerate(self.buffers) if offsets[i] + b.size == top]
        movable = sorted({*highest, *(j for i in highest for j in self.conflicts[i])})
        candidate = list(order)
        for _ in range(rng.randint(1, 4)):
            moved = rng.choice(movable)
            candidate.remove(moved)
            candidate.insert(rng.randrange(len(candidate) + 1), moved)
        return candidate


def _by_busiest_point(placer: Placer) -> list[int]:
    """Buffers live at the busiest program point first (largest first), then the next busiest point's."""
    buffers = placer.buffers
    order: list[int] = []
    seen: set[int] = set()
    for point in sorted(range(len(buffers)), key=lambda p: (-placer.loads[p], buffers[p].start)):
        for j in sorted(placer.live[point], key=lambda k: (-buffers[k].size, buffers[k].start, k)):
            if j not in seen:
                seen.add(j)
                order.append(j)
    return order


def _sorted_by(key: Callable[[Lifetime], tuple]) -> Callable[[Placer], list[int]]:
    return lambda placer: sorted(range(len(placer.buffers)), key=lambda k: (*key(placer.buffers[k]), k))


ORDERS: dict[str, Callable[[Placer], list[int]]] = {
    "largest-first": _sorted_by(lambda b: (-b.size, b.start)),
    "earliest-first": _sorted_by(lambda b: (b.start, -b.size)),
    "largest-area-first": _sorted_by(lambda b: (-b.size * (b.end - b.start + 1), b.start)),
    "busiest-point-first": _by_busiest_point,
}
"""The orders in which placements take buffers; `Placer.solve` tries each with best and first fit."""

SEARCH_ROUNDS = 300
"""How many perturbed orders the local search tries at most when no greedy placement reaches the bound."""
SEARCH_WORK = 400_000
"""The local search's budget in buffer-and-conflict visits (a placement makes one per buffer and per
conflicting pair): big programs get fewer rounds, so allocation stays well under a second."""


def _pack(weights: Sequence[Weight], alignment: int) -> tuple[dict[str, int], int]:
    offsets, top = {}, 0
    for weight in weights:
        offsets[weight.name] = top
        top += aligned(weight.type.nbytes, alignment)
    return offsets, top


def allocate(function: IRFunction, alignment: int = 64) -> MemoryPlan:
    """Give every activation and weight of `function` a byte offset in its region."""
    if alignment <= 0:
        raise ValueError(f"alignment must be positive, got {alignment}")
    buffers = lifetimes(function, alignment)
    placer = Placer(buffers)
    offsets, strategy = placer.solve()
    activation_bytes = placer.top(offsets)
    weights = list(function.weights.values())
    constants, constant_bytes = _pack([w for w in weights if w.role == "constant"], alignment)
    placeholders, placeholder_bytes = _pack([w for w in weights if w.role != "constant"], alignment)
    report = MemoryReport(sum(b.size for b in buffers), activation_bytes, placer.bound)
    return MemoryPlan(alignment, {b.name: o for b, o in zip(buffers, offsets)}, activation_bytes,
                      constants, constant_bytes, placeholders, placeholder_bytes, report, strategy)


def check_plan(function: IRFunction, plan: MemoryPlan) -> None:
    """Raise PlanError unless `plan` is a valid layout of `function`.

    Checked by brute force, independently of the placement: every buffer and view
    is aligned (a view at its base's offset plus its own) and lies inside its
    region, and no two activations whose lifetimes intersect share a byte.
    """
    placed: list[tuple[str, int, int, int, int]] = []
    start: dict[int, int] = {}
    for index, instr in enumerate(function.instructions):
        if instr.kind == "AllocActivation":
            start[id(instr)] = index
        elif instr.kind == "DeallocActivation":
            alloc = instr.operands[0]
            placed.append(_checked(plan, alloc, start[id(alloc)], index))
            del start[id(alloc)]
    ends = len(function.instructions)
    placed += [_checked(plan, i, start[id(i)], ends) for i in function.instructions if id(i) in start]
    for i, (name, lo, hi, first, last) in enumerate(placed):
        for other, lo2, hi2, first2, last2 in placed[i + 1:]:
            if first <= last2 and first2 <= last and lo < hi2 and lo2 < hi:
                raise PlanError(f"%{name} [{lo}, {hi}) and %{other} [{lo2}, {hi2}) overlap in memory "
                                f"while both are live (instructions {max(first, first2)}..{min(last, last2)})")
    for weight in function.weights.values():
        _checked(plan, weight, 0, 0)
    for instr in function.instructions:
        if instr.kind == "TensorView":
            _checked(plan, instr, 0, 0)


def _checked(plan: MemoryPlan, value: Value, first: int, last: int) -> tuple[str, int, int, int, int]:
    """(name, byte range, lifetime) of `value` once its alignment and bounds are checked."""
    try:
        region, offset = plan.address(value)
    except KeyError:
        raise PlanError(f"%{base_of(value).name} has no offset in the plan") from None
    end = offset + value.type.nbytes
    if isinstance(value, Instruction) and value.kind == "TensorView":
        base = base_of(value)
        base_region, base_offset = plan.address(base)
        if base_region != region or not base_offset <= offset <= end <= base_offset + base.type.nbytes:
            raise PlanError(f"view %{value.name} at {region} byte {offset} is not inside %{base.name}")
    elif offset % plan.alignment:
        raise PlanError(f"%{value.name} at {region} byte {offset} is not {plan.alignment}-byte aligned")
    if offset < 0 or end > plan.region_bytes(region):
        raise PlanError(f"%{value.name} [{offset}, {end}) lies outside the {region} region "
                        f"({plan.region_bytes(region)} bytes)")
    return value.name, offset, end, first, last
