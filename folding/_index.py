"""Array views of a :class:`~folding.model.FoldProblem`, built once per problem."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from .hierarchy import Hierarchy
    from .model import FoldProblem, Leaf

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
ObjArray = npt.NDArray[np.object_]

# Bounds use this for "no upper limit" so they stay integer arrays.
UNBOUNDED = np.iinfo(np.int64).max // 4


@dataclass(frozen=True, eq=False)
class ProblemIndex:
    """Per-leaf and per-node arrays of one problem.

    Node indices: leaves are ``0..n-1`` in chronological order, summaries
    ``n..n+S-1`` in input order.

    Attributes
    ----------
    n, n_summaries : int
    leaf_tokens, salience : ndarray, shape (n,)
    node_tokens : ndarray of int64, shape (n + S,)
    unit_keys : ndarray of object, shape (n + S,)
        ``"raw:<leaf>"`` for leaves, ``"recall:<summary>"`` for summaries.
    lo, hi : ndarray of int64, shape (n,)
        Lowest and highest allowed level of each leaf after zones, pins (clamped to
        what exists), locks and availability. ``lo > hi`` is a conflict.
    avail : ndarray of int64, shape (n,)
        Deepest existing level over each leaf.
    protected : ndarray of bool, shape (n,)
        Leaves forced raw by their constraints (``hi == 0``). A protected leaf shown
        raw inside a selected summary's span is a hole: it renders beside the recall.
    cap : ndarray of int64, shape (n,)
        Highest level the constraints alone allow (ignoring which summaries exist);
        ``UNBOUNDED`` when unconstrained. A leaf with ``cap >= 1`` and no summary yet
        is foldable once one is produced.
    locked : ndarray of bool, shape (n,)
    in_zone : ndarray of bool, shape (n,)
        Head or tail leaves.
    previous : ndarray of int64, shape (n,)
        The carried frontier as levels (0 where absent).
    selectable : ndarray of bool, shape (S,)
        Summaries a frontier may show (see :func:`folding.frontiers.selectable_summaries`);
        computed on first use.
    """

    n: int
    n_summaries: int
    leaf_tokens: IntArray
    salience: FloatArray
    node_tokens: IntArray
    unit_keys: ObjArray
    lo: IntArray
    hi: IntArray
    avail: IntArray
    protected: BoolArray
    cap: IntArray
    locked: BoolArray
    in_zone: BoolArray
    previous: IntArray
    has_previous: bool
    raw_tokens: IntArray
    """What each leaf stands for, raw: ``Leaf.raw_tokens`` (its tokens when unset)."""
    span: IntArray
    """How many messages each leaf stands for (``Leaf.span``): ages count them."""
    parted: IntArray
    """The leaves with ``Leaf.parts``, in order (usually none)."""
    hierarchy: Hierarchy = field(repr=False)
    part_arrays: dict[int, tuple[Leaf, IntArray]] = field(default_factory=dict, repr=False)
    """Each parted leaf's parts as an array, by the leaf object's id (the leaf kept
    beside it), filled by :attr:`parts`."""
    carried_parts: dict[int, tuple[Leaf, IntArray]] = field(default_factory=dict, repr=False)
    """:attr:`part_arrays` of the problem this one extends: a leaf that stays is not
    converted again."""

    @cached_property
    def parts(self) -> tuple[IntArray, IntArray, IntArray]:
        """The ``Leaf.parts`` of all leaves, flat: for each part its leaf, how many
        parts of its leaf come after it, and its raw tokens."""
        leaves = self.hierarchy.leaves
        carried, mine = self.carried_parts, self.part_arrays
        arrays: list[IntArray] = []
        for i in self.parted.tolist():
            x = leaves[i]
            found = carried.get(id(x))
            if found is None or found[0] is not x:
                found = (x, np.array(x.parts or (), dtype=np.int64))
            mine[id(x)] = found
            arrays.append(found[1])
        counts = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
        total = int(counts.sum())
        tokens = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
        leaf = np.repeat(self.parted, counts)
        ends = np.cumsum(counts)
        later = np.repeat(ends, counts) - 1 - np.arange(total, dtype=np.int64)
        return leaf, later, tokens

    @cached_property
    def weights(self) -> dict[float, FloatArray]:
        """Fidelity weights by age exponent (:func:`folding.fidelity_weights`)."""
        return {}

    @cached_property
    def resolved(self) -> dict[tuple[str, tuple[int, ...], bytes], tuple[IntArray, list[Any]]]:
        """Units of the level arrays last resolved (:func:`folding.render.resolve_units`)."""
        return {}

    @cached_property
    def leaf_id_array(self) -> ObjArray:
        """The leaf ids as an object array, for vectorised lookups."""
        ids = np.empty(self.n, dtype=object)
        ids[:] = self.hierarchy.leaf_ids
        return ids

    @cached_property
    def selectable(self) -> BoolArray:
        """Summaries with a non-protected member, every such member allowing the level.

        One pass of :meth:`~folding.hierarchy.Hierarchy.span_reduce` over three
        per-leaf columns, each reduced by its maximum: the highest lowest level, minus
        the lowest highest level, and whether the leaf is free.
        """
        h = self.hierarchy
        free = ~self.protected
        columns = np.stack(
            [
                np.where(free, self.lo, 0),
                -np.where(free, self.hi, h.depth + 1),
                free.astype(np.int64),
            ],
            axis=1,
        )
        reduced = h.span_reduce(columns, np.maximum)
        level = h.summary_level
        out = (reduced[:, 2] > 0) & (reduced[:, 0] <= level) & (-reduced[:, 1] >= level)
        return np.asarray(out, dtype=np.bool_)

    @classmethod
    def build(
        cls, problem: FoldProblem, hierarchy: Hierarchy, extends: ProblemIndex | None = None
    ) -> ProblemIndex:
        n = hierarchy.n_leaves
        leaf_index = hierarchy.leaf_index
        avail = hierarchy.avail
        lo = np.zeros(n, dtype=np.int64)
        hi = avail.copy()
        zones = np.fromiter(
            (leaf.zone != "middle" for leaf in problem.leaves), dtype=np.bool_, count=n
        )
        hi[zones] = 0
        cap = np.full(n, UNBOUNDED, dtype=np.int64)
        cap[zones] = 0
        for pin in problem.pins:
            idx = np.fromiter(
                (leaf_index[leaf] for leaf in pin.leaves), dtype=np.int64, count=len(pin.leaves)
            )
            p_lo, p_hi = pin.bounds()
            if p_lo:
                lo[idx] = np.maximum(lo[idx], np.minimum(p_lo, avail[idx]))
            if p_hi != float("inf"):
                level_cap = int(p_lo) if pin.level is not None else int(p_hi)
                cap[idx] = np.minimum(cap[idx], level_cap)
                if pin.level is not None:
                    hi[idx] = np.minimum(hi[idx], np.minimum(level_cap, avail[idx]))
                else:
                    hi[idx] = np.minimum(hi[idx], level_cap)
        previous = np.zeros(n, dtype=np.int64)
        for leaf, level in (problem.previous or {}).items():
            previous[leaf_index[leaf]] = level
        locked = np.zeros(n, dtype=np.bool_)
        if problem.locks:
            idx = np.fromiter(
                (leaf_index[leaf] for leaf in problem.locks),
                dtype=np.int64,
                count=len(problem.locks),
            )
            lo[idx] = np.maximum(lo[idx], previous[idx])
            hi[idx] = np.minimum(hi[idx], previous[idx])
            cap[idx] = np.minimum(cap[idx], previous[idx])
            locked[idx] = True
        keys = np.empty(n + len(hierarchy.summaries), dtype=object)
        keys[:n] = [f"raw:{leaf}" for leaf in hierarchy.leaf_ids]
        keys[n:] = [f"recall:{s}" for s in hierarchy.summary_ids]
        return cls(
            n=n,
            n_summaries=len(hierarchy.summaries),
            leaf_tokens=hierarchy.leaf_tokens,
            salience=np.fromiter(
                (leaf.salience for leaf in problem.leaves), dtype=np.float64, count=n
            ),
            node_tokens=np.concatenate([hierarchy.leaf_tokens, hierarchy.summary_tokens]),
            unit_keys=keys,
            lo=lo,
            hi=hi,
            avail=avail,
            protected=hi == 0,
            cap=cap,
            locked=locked,
            in_zone=zones,
            previous=previous,
            has_previous=problem.previous is not None,
            raw_tokens=np.fromiter(
                (
                    leaf.raw_tokens
                    if leaf.raw_tokens is not None
                    else leaf.tokens
                    if leaf.parts is None
                    else sum(leaf.parts)
                    for leaf in problem.leaves
                ),
                dtype=np.int64,
                count=n,
            ),
            span=np.fromiter((leaf.span for leaf in problem.leaves), dtype=np.int64, count=n),
            parted=np.fromiter(
                (i for i, leaf in enumerate(problem.leaves) if leaf.parts is not None),
                dtype=np.int64,
            ),
            hierarchy=hierarchy,
            carried_parts=extends.part_arrays if extends is not None else {},
        )
