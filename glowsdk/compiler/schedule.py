"""The memory-minimising schedule (paper 3.6 step 6).

`schedule` reorders `function.nodes` into the topological order, among those its
strategies find, whose peak of live activation bytes is lowest. The strategies:

* depth-first (Glow's scheduler): each node's operands are computed just before
  it, the operand whose subtree needs the most memory beyond its result first
  (Liu's rule, optimal when the graph is a tree);
* greedy list scheduling: at each step the ready node that grows live bytes
  least, weights prepared on demand, chains kept together on ties; and the same
  with a guard that delays nodes raising the running peak.

Depth-first wins on trees of branches (inception modules, weight Splats); the
greedy orders win where branches share an input that a cheap branch can free
early (shufflenet's shortcut pooling).

The memory model, which `live_bytes_profile` computes and `schedule` minimises:

* An order is a permutation of `function.nodes` in which every producer comes
  before its users; step i runs `order[i]`.
* Activations are the results of the function's nodes. Constants and
  Placeholders are module storage that lives for the whole run, so they are not
  counted: neither the input Placeholders nor the output Placeholders Saves
  write into. The value a Save writes is an ordinary activation: it counts
  until its last user, the Save at the latest.
* A node allocates all its results at its step, every result of a multi-result
  node included (a result nobody reads lives for that step only).
* A result is freed after the step of its last user in the function. Nothing is
  computed in place and no result aliases another (a Reshape allocates too), so
  at a node's step its operands and its results are all live.
* `live_bytes[i]` is the sum of `Type.nbytes` over the results live at step i;
  the peak is its maximum (0 for an empty function).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

from ..errors import GraphError
from ..graph.function import Function
from ..graph.node import Node, Placeholder


@dataclass(frozen=True)
class ScheduleReport:
    """What `schedule` did: the peak before and after, and the peak of every order it tried.

    `lower_bound` is the most bytes one node needs at its own step (its operands
    and results): no order goes below it, so a schedule that reaches it is optimal.
    """

    original_peak: int
    scheduled_peak: int
    lower_bound: int
    strategy: str
    peaks: dict[str, int]

    @property
    def saved_fraction(self) -> float:
        """The share of the original peak the new schedule saves."""
        return 1 - self.scheduled_peak / self.original_peak if self.original_peak else 0.0


def live_bytes_profile(function: Function, order: Sequence[Node]) -> list[int]:
    """The bytes of activations live at each step of `order` (see the module docstring)."""
    graph = _Graph(function)
    return graph.profile(graph.indices(order))


def peak_live_bytes(function: Function, order: Sequence[Node]) -> int:
    """The largest number of activation bytes live at once under `order`."""
    return max(live_bytes_profile(function, order), default=0)


def schedule(function: Function) -> ScheduleReport:
    """Reorder `function.nodes` to minimise peak live activation bytes.

    Every strategy's order is measured with the memory model and the lowest peak
    wins; the original (topological) order is kept unless one strictly beats it.
    """
    graph = _Graph(function)
    orders = {"original": graph.topological}
    for name, strategy in _STRATEGIES.items():
        orders[name] = strategy(graph)
    peaks = {name: max(graph.profile(order), default=0) for name, order in orders.items()}
    best = min(peaks, key=peaks.__getitem__)
    function.nodes[:] = [graph.nodes[i] for i in orders[best]]
    return ScheduleReport(peaks["original"], peaks[best], graph.lower_bound(), best, peaks)


def _breadth_first(graph: _Graph) -> list[int]:
    """Plain topological order (Kahn's algorithm, first in first out): the baseline to beat.

    It is what a scheduler that ignores memory produces and usually keeps every
    branch of a fan-out alive at once, but on some graphs it is the best order.
    """
    waiting = [len(operands) for operands in graph.operands]
    queue = deque(i for i in range(len(graph.nodes)) if not waiting[i])
    order: list[int] = []
    while queue:
        i = queue.popleft()
        order.append(i)
        for user in graph.users[i]:
            waiting[user] -= 1
            if not waiting[user]:
                queue.append(user)
    return order


class _Graph:
    """A function as integer tables: values (results) with sizes, readers and producers.

    Node i produces values `outputs[i]` and reads the distinct values `reads[i]`;
    `operands[i]` and `users[i]` are the distinct producer and user nodes in the
    function (storage is outside it, so it never appears; `reads_placeholder[i]`
    says whether node i reads a Placeholder).
    """

    def __init__(self, function: Function) -> None:
        self.nodes = list(function.nodes)
        self.position = {id(node): i for i, node in enumerate(self.nodes)}
        self.size: list[int] = []
        self.producer: list[int] = []
        self.outputs: list[list[int]] = []
        for i, node in enumerate(self.nodes):
            self.outputs.append(list(range(len(self.size), len(self.size) + len(node.types))))
            self.size.extend(t.nbytes for t in node.types)
            self.producer.extend(i for _ in node.types)
        self.result_size = [sum(self.size[v] for v in values) for values in self.outputs]
        self.readers: list[list[int]] = [[] for _ in self.size]
        self.reads: list[list[int]] = [[] for _ in self.nodes]
        self.operands: list[list[int]] = [[] for _ in self.nodes]
        self.users: list[list[int]] = [[] for _ in self.nodes]
        self.reads_placeholder = [False] * len(self.nodes)
        for i, node in enumerate(self.nodes):
            for value in node.present_inputs():
                j = self.position.get(id(value.node))
                if j is None:
                    self.reads_placeholder[i] |= isinstance(value.node, Placeholder)
                    continue
                vid = self.outputs[j][value.index]
                if vid not in self.reads[i]:
                    self.reads[i].append(vid)
                    self.readers[vid].append(i)
                if j not in self.operands[i]:
                    self.operands[i].append(j)
                    self.users[j].append(i)
        self.topological = self.indices(function.topo_order())

    def indices(self, order: Sequence[Node]) -> list[int]:
        """`order` as node indices; GraphError unless it is a topological order of the function."""
        indices = [self.position.get(id(node), -1) for node in order]
        if sorted(indices) != list(range(len(self.nodes))):
            raise GraphError("the order is not a permutation of the function's nodes")
        step = [0] * len(indices)
        for s, i in enumerate(indices):
            step[i] = s
        for i in indices:
            for j in self.operands[i]:
                if step[j] > step[i]:
                    raise GraphError(f"the order runs '{self.nodes[i].name}' before its operand "
                                     f"'{self.nodes[j].name}'")
        return indices

    def profile(self, order: list[int]) -> list[int]:
        """Live bytes per step: each value counts from its producer's step to its last reader's."""
        step = [0] * len(order)
        for s, i in enumerate(order):
            step[i] = s
        delta = [0] * (len(order) + 1)
        for vid, size in enumerate(self.size):
            born = step[self.producer[vid]]
            last = max((step[r] for r in self.readers[vid]), default=born)
            delta[born] += size
            delta[last + 1] -= size
        live, total = [], 0
        for change in delta[:-1]:
            total += change
            live.append(total)
        return live

    def lower_bound(self) -> int:
        """The largest bytes any node's step holds whatever the order: its operands and results."""
        return max((sum(self.size[v] for v in self.reads[i]) + self.result_size[i]
                    for i in range(len(self.nodes))), default=0)


# -- strategies ------------------------------------------------------------------------------
def _subtree_peaks(graph: _Graph) -> list[int]:
    """Per node, the peak bytes of computing it as if its operands formed a tree.

    Liu's rule for trees: compute the operand subtrees in decreasing order of
    (peak - result bytes); while computing the j-th, the results of the earlier
    ones are held. Shared operands are counted once per user, so on a DAG this
    is an estimate, used only to rank operands.
    """
    peak = [0] * len(graph.nodes)
    for i in graph.topological:
        held = highest = 0
        for c in _highest_first(graph.operands[i], lambda c: peak[c] - graph.result_size[c]):
            highest = max(highest, held + peak[c])
            held += graph.result_size[c]
        peak[i] = max(highest, held + graph.result_size[i])
    return peak


def _depth_first(graph: _Graph, key: Callable[[int], int]) -> list[int]:
    """Glow's order: a node's operands are computed just before it, highest `key` first.

    Roots (nodes nobody uses: the Saves) go highest key first too. A node without
    results (a Save) is placed as soon as its operands are, since it can only
    shorten lifetimes.
    """
    done = [False] * len(graph.nodes)
    order: list[int] = []

    def emit(i: int) -> None:
        done[i] = True
        order.append(i)
        for user in graph.users[i]:
            if not graph.outputs[user] and not done[user] and all(done[c] for c in graph.operands[user]):
                emit(user)

    roots = [i for i in graph.topological if not graph.users[i]]
    for root in _highest_first(roots, key):
        _operands_first(graph, root, done, emit, lambda operands: _highest_first(operands, key))
    return order


def _operands_first(graph: _Graph, i: int, done: list[bool], emit: Callable[[int], None],
                    arrange: Callable[[list[int]], list[int]]) -> None:
    """Emit node `i` after every operand not yet done, recursively (without recursion).

    `arrange` puts a node's operands in the order to compute them.
    """
    stack = [(i, False)]
    while stack:
        j, operands_done = stack.pop()
        if done[j]:
            continue
        if operands_done:
            emit(j)
            continue
        stack.append((j, True))
        stack.extend((c, False) for c in reversed(arrange(graph.operands[j])) if not done[c])


def _highest_first(nodes: list[int], key: Callable[[int], int]) -> list[int]:
    """`nodes` by decreasing key; equal keys keep their order (the sort is stable)."""
    return sorted(nodes, key=key, reverse=True)


def _liu_order(graph: _Graph) -> list[int]:
    peak = _subtree_peaks(graph)
    return _depth_first(graph, lambda i: peak[i] - graph.result_size[i])


def _greedy_order(graph: _Graph, guard_peak: bool) -> list[int]:
    """List scheduling: run the ready node that grows live bytes least (or frees most).

    With `guard_peak`, a node whose step would raise the running peak comes
    after every node that would not. Nodes computed from Constants alone (weight
    preparation such as Splat or a Reshape of a Constant) are not candidates:
    they run on demand, just before their first chosen user, and their kept
    bytes count in that user's cost. Ties go to the node that became ready last,
    which keeps chains together, then to the earliest node.
    """
    n = len(graph.nodes)
    lazy = [False] * n
    for i in graph.topological:
        lazy[i] = (bool(graph.outputs[i]) and not graph.reads_placeholder[i]
                   and all(lazy[c] for c in graph.operands[i]))
    waiting = [sum(1 for c in graph.operands[i] if not lazy[c]) for i in range(n)]
    unread = [len(readers) for readers in graph.readers]
    done = [False] * n
    ready = {i: 0 for i in range(n) if not lazy[i] and not waiting[i]}
    order: list[int] = []
    live = peak = 0

    def emit(i: int) -> None:
        nonlocal live, peak
        done[i] = True
        order.append(i)
        live += graph.result_size[i]
        peak = max(peak, live)
        live -= sum(graph.size[v] for v in graph.outputs[i] if not graph.readers[v])
        for vid in graph.reads[i]:
            unread[vid] -= 1
            if not unread[vid]:
                live -= graph.size[vid]
        if lazy[i]:
            return
        for user in graph.users[i]:
            waiting[user] -= 1
            if not waiting[user]:
                ready[user] = len(order)

    def cost(i: int) -> tuple[int, int]:
        pending = [c for c in graph.operands[i] if not done[c]]
        kept = sum(graph.size[v] for v in graph.outputs[i] if graph.readers[v])
        kept += sum(graph.size[v] for c in pending for v in graph.outputs[c]
                    if unread[v] > (v in graph.reads[i]))
        freed = sum(graph.size[v] for v in graph.reads[i] if unread[v] == 1 and done[graph.producer[v]])
        step = live + graph.result_size[i] + sum(graph.result_size[c] for c in pending)
        return (max(step, peak) if guard_peak else 0, kept - freed)

    while ready:
        best = min(ready, key=lambda i: (cost(i), -ready[i], i))
        del ready[best]
        _operands_first(graph, best, done, emit, list)
    for i in range(n):
        _operands_first(graph, i, done, emit, list)
    return order


_STRATEGIES: dict[str, Callable[[_Graph], list[int]]] = {
    "breadth-first": _breadth_first,
    "depth-first": _liu_order,
    "greedy": lambda graph: _greedy_order(graph, guard_peak=False),
    "greedy-peak": lambda graph: _greedy_order(graph, guard_peak=True),
}
