"""The attention_head's counters against its blocks' exact models, shared by the Amaranth
test (``tests/engine/test_attention_head.py``) and the cocotb bench (``sim/engine/head``).
Plain Python: no simulator imports."""

from __future__ import annotations


def check_stage_counters(cnt, s_model_cycles: int, pv_model: dict, n: int, rows: int,
                         pv_streamed_cycles: int):
    """The head's counters against the blocks' models. P @ V starts with the softmax stage and
    waits for P a row block at a time, so its work counters equal ``pv_counters`` exactly
    and its cycles exceed the model's by the cycles its arrays waited (at most the softmax
    stage's, less when there is more than one row block of ``rows`` queries), and equal
    ``pv_streamed_cycles``, the model's given when each row block of P could be read
    (``pv_counters(..., p_ready=...)``); every cycle of the run is in S or in the overlapped
    stage."""
    assert cnt["s"]["cycles"] == s_model_cycles
    # S's stage ends in the cycle the engine's done is seen (the engine counts from its
    # start to the cycle before); P @ V's counts what its block counts.
    assert cnt["s_cycles"] == s_model_cycles + 1
    pv = dict(cnt["pv"])
    assert {k: v for k, v in pv.items() if k != "cycles"} == {
        k: v for k, v in pv_model.items() if k != "cycles"}
    assert pv_model["cycles"] <= pv["cycles"] <= pv_model["cycles"] + cnt["softmax_cycles"]
    if n > rows:
        # P @ V starts on the first row block of P, not after the whole softmax stage.
        assert pv["cycles"] - pv_model["cycles"] < cnt["softmax_cycles"] - 1, (
            "P @ V waited for the whole softmax stage")
    assert pv["cycles"] == pv_streamed_cycles, (pv["cycles"], pv_streamed_cycles)
    assert pv_streamed_cycles > pv_model["cycles"]          # it did wait for P
    assert cnt["pv_cycles"] == pv["cycles"]
    # The overlapped stage lasts to the cycle in which both ends are seen.
    assert cnt["cycles"] == cnt["s_cycles"] + max(cnt["softmax_cycles"], cnt["pv_cycles"]) + 1
    # S streams at most two scores per cycle into the vector unit.
    assert cnt["softmax_cycles"] >= n ** 2 / 2
