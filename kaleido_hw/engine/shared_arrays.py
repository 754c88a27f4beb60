"""One set of PE arrays for QK^T and P @ V (``docs/vector.md``, "A whole head in RTL").

With ``engine_pe = "reuse-pv"`` the KaleidoEngine's arrays also run P @ V steps
(``docs/linear.md``, "P @ V in the ReusePE"), so a block that chains the KaleidoEngine and
``pv_engine`` needs only one set of arrays. Each engine is then built with
``shared_arrays=True``: instead of its own arrays it drives :class:`ArrayView`\\ s, the
array's ports as plain signals (steps, tag out; drain records and the busy count in), and the
block that owns the arrays connects every real array to one view at a time
(:func:`share_array`). The engines' logic is unchanged: a view has the ports, layouts and
timing of the array it stands for.
"""

from __future__ import annotations

from amaranth.hdl import Mux, Signal
from amaranth.lib import data

from kaleido_hw.array.layouts import drain_port_layout
from kaleido_hw.array.pv_tile_cell import (PvPEArray, Window3PvPEArray, pv_tile_col_layout,
                                           pv_tile_row_layout)
from kaleido_hw.bitops import bits_for
from kaleido_hw.config import KaleidoConfig
from kaleido_hw.dispatch.pv_merged_cell import (PvMergedArray, Window3PvMergedArray,
                                                pv_merged_col_layout, pv_merged_row_layout)


__all__ = ["folded_array", "ArrayView", "share_array", "check_shared"]


def check_shared(config: KaleidoConfig, who: str) -> None:
    """Raise ValueError unless ``config`` builds the arrays with the P @ V mode (only they
    run both engines' steps)."""
    if config.engine_pe != "reuse-pv":
        raise ValueError(f"{who} with shared_arrays needs engine_pe = 'reuse-pv' (the arrays "
                         f"with the P @ V mode), got engine_pe = {config.engine_pe!r}")


def folded_array(config: KaleidoConfig):
    """``(class, row layout, column layout)`` of the arrays with the P @ V mode for
    ``config``: PvMergedArray with the matcher, PvPEArray without (their window-3 versions
    with ``engine_window3``)."""
    w3 = config.engine_window3
    if config.engine_dispatcher in ("matcher", "full"):
        return ((Window3PvMergedArray if w3 else PvMergedArray), pv_merged_row_layout(w3),
                pv_merged_col_layout())
    return (Window3PvPEArray if w3 else PvPEArray), pv_tile_row_layout(w3), pv_tile_col_layout()


class ArrayView:
    """The ports of one array with the P @ V mode as signals, for an engine that drives an
    array it does not own: ``row``, ``col`` and ``tag`` (driven by the engine), ``drain``
    and ``busy_count`` (driven by :func:`share_array`), with the array's layouts and the
    engine's own ``tag_width``.

    Parameters
    ----------
    config : KaleidoConfig
        ``rows``, ``cols``, ``acc_width``, ``engine_dispatcher`` (which array).
    tag_width : int
        The engine's drain tag width.
    name : str
        Prefix of the signals' names.
    """

    def __init__(self, config: KaleidoConfig, tag_width: int, name: str):
        _, row, col = folded_array(config)
        R, C = config.rows, config.cols
        self.tag_width = tag_width
        self.row = Signal(data.ArrayLayout(row, R), name=f"{name}_row")
        self.col = Signal(data.ArrayLayout(col, C), name=f"{name}_col")
        self.tag = Signal(tag_width, name=f"{name}_tag")
        self.drain = Signal(data.ArrayLayout(drain_port_layout(config.acc_width, R, tag_width),
                                             C), name=f"{name}_drain")
        self.busy_count = Signal(bits_for(R * C), name=f"{name}_busy_count")


def share_array(m, array, views, select) -> None:
    """Connect ``array`` to ``views[select]``: its steps and tag come from that view, its
    drain records and busy count go to that view (the others see no valid drain and no busy
    PE). The owner switches ``select`` only while the array holds no work of the view it
    leaves (an engine's run has ended with its last drain wave)."""
    row, col, tag = views[0].row, views[0].col, views[0].tag
    for k, view in enumerate(views[1:], 1):
        row, col = Mux(select == k, view.row, row), Mux(select == k, view.col, col)
        tag = Mux(select == k, view.tag, tag)
    m.d.comb += [array.row.eq(row), array.col.eq(col), array.tag.eq(tag)]
    for k, view in enumerate(views):
        mine = select == k
        for j in range(len(array.drain)):
            src, dst = array.drain[j], view.drain[j]
            m.d.comb += [dst.valid.eq(src.valid & mine), dst.row.eq(src.row),
                         dst.data.eq(src.data), dst.tag.eq(src.tag[:view.tag_width])]
        m.d.comb += view.busy_count.eq(Mux(mine, array.busy_count, 0))
