"""Operating points of the reuse-aware PE: the control words of the paper's Modes 0-3 (a tile
quad of self-attention) and of the linear-layer ("other operations") mode.

Plain Python; the words are :class:`golden.pe.model.Ctrl` values. ``docs/pe.md`` tabulates
them and proves why they are exact. A tile sequencer feeds, per channel step of a pass,
the pass's word (the same for every PE) and, with the data, the reuse codes of the row-side
and column-side followers; the codes make the one word do the right thing in every PE.

Tile quad (output-stationary PE at row r, column c; ``A``/``F`` the Q anchor/follower of row
r, ``a``/``f`` the K anchor/follower of column c; row values are ``Q_eff``, column values
``K_eff``; ``qc0`` carries the code of ``F``, ``kc0`` the code of ``f``, in every pass)::

    tile 0: rows A, cols a  -> T0 = A.a      tile 1: rows A, cols f -> T1 = A.f
    tile 2: rows F, cols a  -> T2 = F.a      tile 3: rows F, cols f -> T3 = F.f
"""

from __future__ import annotations

from dataclasses import dataclass

from golden.pe.model import ColCond, Ctrl, Drain, Move, Op, Part, RowCond, Sel, Split


__all__ = ["QuadPass", "quad_passes", "QUAD_ORDERS", "LinearWords", "linear_words",
           "dense_word", "drain_word", "paired"]

_P = Part.PROD

#: Tile orders of a quad: tile 1 before tile 2 (the paper's Fig. 14 order) or the reverse.
QUAD_ORDERS = ("t1-first", "t2-first")


@dataclass(frozen=True)
class QuadPass:
    """One pass of a tile quad.

    ``word`` is the control word of every channel step of the pass. ``entry`` holds the
    fields that the *first* step of the pass adds (clear/move/drain): they bring the pass's
    tile into R0 and drain the previous tile from R0 in the same cycle, so passes follow
    each other without a bubble. ``rows``/``cols`` say which tokens the row and column
    ports carry (``"anchor"`` or ``"follower"``). ``parks`` maps a register to the tile it
    holds for a later pass.
    """
    tile: int
    rows: str
    cols: str
    word: Ctrl
    entry: dict
    parks: dict

    def first_word(self, drain_previous: bool = True) -> Ctrl:
        """The word of the pass's first step (``drain_previous``: R0 holds a finished tile)."""
        fields = dict(self.entry)
        if not drain_previous:
            fields["drain"] = Drain.NONE
        return self.word.with_(**fields)


def quad_passes(order: str = "t1-first", split: Split = Split.AUTO_COL,
                moves: str = "direct") -> list[QuadPass]:
    """The four passes of a tile quad.

    order : ``"t1-first"`` (tiles 0, 1, 2, 3) or ``"t2-first"`` (tiles 0, 2, 1, 3).
    split : the split rule of every MUL step; it must be the same in all four passes (the
        shares of tile 0 and the rests of later passes are then complementary). AUTO_COL gives
        the HIGH part to a HALF column follower, AUTO_ROW to a HALF row follower; when both are
        HALF only that side gets it and the other tile computes the full product.
    moves : ``"direct"`` (R1_TO_R0 / R2_TO_R0) or ``"rotate"`` (ROTATE at every pass
        change; only with ``"t1-first"``).

    The last tile (T3) ends in R0; drain it with the next quad's first word or :func:`drain_word`.
    """
    if order not in QUAD_ORDERS:
        raise ValueError(f"order must be one of {', '.join(QUAD_ORDERS)}, got {order!r}")
    if moves not in ("direct", "rotate"):
        raise ValueError(f"moves must be 'direct' or 'rotate', got {moves!r}")
    if moves == "rotate" and order != "t1-first":
        raise ValueError("moves='rotate' needs order='t1-first'")
    split = Split(split)

    def word(sel0=Sel(), sel1=Sel(), sel2=Sel()):
        return Ctrl(op=Op.MUL, split=split, sel0=sel0, sel1=sel1, sel2=sel2)

    # Tile 0 (paper Mode 0): R0 takes the whole product, R1 what tile 1 (the column
    # follower) shares, R2 what tile 2 (the row follower) shares.
    t0 = QuadPass(0, "anchor", "anchor",
                  word(Sel(_P), Sel(_P, col=ColCond.SHARE), Sel(_P, row=RowCond.SHARE)),
                  {"clear": 0b111, "drain": Drain.R0}, {1: 1, 2: 2})
    R, S = RowCond.REST, RowCond.SHARE
    CR, CS = ColCond.REST, ColCond.SHARE
    if order == "t1-first" and moves == "direct":
        # Tile 1 (Mode 1): R0 = T1 adds what tile 0 did not share; R1 starts T3 with what
        # T3 shares with T1 (row follower); R2 parks T2.
        t1 = QuadPass(1, "anchor", "follower", word(Sel(_P, col=CR), Sel(_P, row=S)),
                      {"move": Move.R1_TO_R0, "drain": Drain.R0}, {1: 3, 2: 2})
        # Tile 2: R0 = T2 adds its rest; R1 (T3) takes what T3 shares with T2 (column
        # follower) and did not already take from T1.
        t2 = QuadPass(2, "follower", "anchor", word(Sel(_P, row=R), Sel(_P, row=R, col=CS)),
                      {"move": Move.R2_TO_R0, "drain": Drain.R0}, {1: 3})
        t3 = QuadPass(3, "follower", "follower", word(Sel(_P, row=R, col=CR)),
                      {"move": Move.R1_TO_R0, "drain": Drain.R0}, {})
        return [t0, t1, t2, t3]
    if order == "t1-first":   # rotate: R1 -> R0, R2 -> R1 at each change
        t1 = QuadPass(1, "anchor", "follower", word(Sel(_P, col=CR), Sel(), Sel(_P, row=S)),
                      {"move": Move.ROTATE, "drain": Drain.R0}, {1: 2, 2: 3})
        t2 = QuadPass(2, "follower", "anchor", word(Sel(_P, row=R), Sel(_P, row=R, col=CS)),
                      {"move": Move.ROTATE, "drain": Drain.R0}, {1: 3})
        t3 = QuadPass(3, "follower", "follower", word(Sel(_P, row=R, col=CR)),
                      {"move": Move.ROTATE, "drain": Drain.R0}, {})
        return [t0, t1, t2, t3]
    # t2-first: tile 2 parks T1 in R1 and starts T3 in R2.
    t2 = QuadPass(2, "follower", "anchor", word(Sel(_P, row=R), Sel(), Sel(_P, col=CS)),
                  {"move": Move.R2_TO_R0, "drain": Drain.R0}, {1: 1, 2: 3})
    t1 = QuadPass(1, "anchor", "follower", word(Sel(_P, col=CR), Sel(), Sel(_P, row=S, col=CR)),
                  {"move": Move.R1_TO_R0, "drain": Drain.R0}, {2: 3})
    t3 = QuadPass(3, "follower", "follower", word(Sel(_P, row=R, col=CR)),
                  {"move": Move.R2_TO_R0, "drain": Drain.R0}, {})
    return [t0, t2, t1, t3]


def paired(word: Ctrl) -> Ctrl:
    """The LOW_PAIR form of a pass word (paper Mode 2, and Mode 3 with a HALF column side):
    two channels in one step, lane i = channel i with codes qc_i, kc_i. Exact only where
    :func:`golden.pe.model.pairable` holds for every PE at both channels."""
    return word.with_(op=Op.LOW_PAIR)


def dense_word(first: bool = False) -> Ctrl:
    """Plain MAC into R0 (reuse off: the dense baseline on the same PE). ``first`` clears R0
    and drains the previous result."""
    w = Ctrl(op=Op.MUL, split=Split.COL, sel0=Sel(_P))
    return w.with_(clear=0b001, drain=Drain.R0) if first else w


def drain_word(register: int = 0) -> Ctrl:
    """An idle step that drains R<register>."""
    return Ctrl(drain=Drain(register + 1))


@dataclass(frozen=True)
class LinearWords:
    """Words of the linear-layer mode (``Y = X @ W``, reuse on the activation side).

    The row carries a window's tokens (anchor, then followers), the column a weight; R0
    accumulates the anchor's output, R1/R2 the outputs of followers 1/2.

    anchor: every channel; qc0/qc1 = codes of followers 1/2; shares go to R1/R2.
    follower1 / follower2: a0 = the follower's value, qc0 = its code; adds the rest.
    both_half: window 3, both followers HALF at this channel (a0/a1 = their values, qc0/qc1
        their codes): one LOW step adds both low-nibble products (lane 0 -> R1, lane 1 -> R2).
    """
    anchor: Ctrl
    follower1: Ctrl
    follower2: Ctrl | None
    both_half: Ctrl | None


def linear_words(window: int = 2) -> LinearWords:
    """Words of the linear mode for windows of ``window`` tokens (2 or 3)."""
    if window not in (2, 3):
        raise ValueError(f"window must be 2 or 3 (R1/R2 hold the followers), got {window!r}")
    row = Split.ROW
    anchor = Ctrl(op=Op.MUL, split=row, sel0=Sel(_P), sel1=Sel(_P, row=RowCond.SHARE),
                  sel2=Sel(_P, row=RowCond.SHARE1) if window == 3 else Sel())
    f1 = Ctrl(op=Op.MUL, split=row, sel1=Sel(_P, row=RowCond.REST))
    if window == 2:
        return LinearWords(anchor, f1, None, None)
    f2 = Ctrl(op=Op.MUL, split=row, sel2=Sel(_P, row=RowCond.REST))
    both = Ctrl(op=Op.LOW, split=row, sel1=Sel(Part.LOW, row=RowCond.REST),
                sel2=Sel(Part.HIGH, row=RowCond.REST))
    return LinearWords(anchor, f1, f2, both)
