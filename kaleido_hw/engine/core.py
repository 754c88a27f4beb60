"""The streaming engine core (``docs/engine.md``, "Engine core"): one command stream drives
the KaleidoEngine box by box over a DMA memory port, so that the head length is bounded by
address widths, not by on-chip storage.

A head of any length is cut into boxes of the latent grid (``engine_max_tokens`` tokens at
most, even along every reused axis so that anchor/follower pairs never straddle a border);
S of the head is the set of S blocks of every (Q box, K box) pair. The controller executes
the commands of :mod:`golden.engine.commands` in order:

* CONFIG, GROUPS, STRIDES latch the run's parameters (one cycle each);
* LOAD walks the box's tokens into the named bank, in the load unit: a request walker asks
  the DMA for ``head_dim / 8`` beats per token inside the grid, a write walker moves the
  returned beats into the engine's Q or K memory (padding tokens outside the grid are
  written as zeros, never fetched); a ``rows`` LOAD walks ``box_tokens`` consecutive rows
  instead (the weight rows of a linear block);
* COMPUTE starts the engine on the loaded pair (kind S, or kind linear: the engine's
  ``cfg.linear``; with ``acc`` adding onto the unstored result) and adds its counters to the
  core's;
* STORE streams the S block (``box_tokens**2`` int32, row-major, two per 64-bit beat) to
  memory through one DMA write, forwarding the engine's read-out beats;
* FENCE waits until the load unit is idle and the DMA has no transfer in flight.

Errors (a malformed command, a command out of order, an engine configuration error, an AXI
error reported by the DMA) stop execution with a sticky ``error`` code and the index of the
failing command; later commands are consumed and dropped, so a producer never blocks, until
``error_clear``. The controller drains what is in flight (read data, S beats) before it
accepts commands again, so a run after an error starts clean.

The scratchpad has ``core_banks`` banks per side (the engine's Q/K memories that many boxes
deep). The controller hands each LOAD's walk to a load unit that runs while later commands
execute, so the next box loads while the engine computes on the other bank; one more LOAD
waits in the load unit's queue while it walks. Order is kept by holds at the decode: a
COMPUTE that reads a bank being walked or queued, and CONFIG, STRIDES and STORE, wait for
the walks; a LOAD is decoded only once the COMPUTE before it has ended (the
controller waits for ``done``), so no walk overwrites a bank a run reads. An error names the
first failing command in program order: an AXI error during a walk is its LOAD's, even
when a later command has already failed its decode. ``cnt.mem_wait`` counts the cycles in
which the arrays waited for memory (every counted cycle outside a COMPUTE).

Built with ``core_attention`` the core also runs whole attention heads (``docs/engine.md``,
"The attention path in the core"): ATTENTION is latched; LOADs of side V go through the
load unit into the V memory of a :class:`~kaleido_hw.engine.block_attention.BlockAttention`
(a V bank per scratchpad bank); a COMPUTE of kind 2 computes the block's S on the engine
and streams it through an :class:`~kaleido_hw.engine.s_row_packer.SRowPacker` that masks
the K box's padding keys into the block datapath (AT_READ, AT_BLOCK), whose softmax and
P @ V then run on while the next commands go on (``blk_running``); a STORE of O takes the
query box's O through an :class:`~kaleido_hw.engine.o_packer.OPacker`.
"""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, ResetInserter, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from golden.engine import commands as cmds
from golden.engine.core_model import ATTENTION_COUNTERS, CORE_COUNTERS
from golden.engine.program import pv_block_keys
from golden.vector.softmax import MULT_MIN, SHIFT_MAX, SHIFT_MIN
from kaleido_hw.config import ConfigError, KaleidoConfig
from kaleido_hw.engine.block_attention import BlockAttention, check_block_attention_config
from kaleido_hw.engine.core_walk import BoxWalker
from kaleido_hw.engine.dma import BEATS_WIDTH, request_layout
from kaleido_hw.engine.kaleido_engine import ARRAY_COUNTERS, KaleidoEngine
from kaleido_hw.engine.host_port import WRITE_BYTES
from kaleido_hw.engine.o_packer import OPacker, o_beats
from kaleido_hw.engine.pv_engine import COUNTERS as PV_COUNTERS
from kaleido_hw.engine.s_row_packer import SRowPacker
from kaleido_hw.engine.shared_arrays import folded_array, share_array
from kaleido_hw.engine.tile_layouts import COUNTER_WIDTH
from kaleido_hw.vector.layouts import MULT_BITS, SHIFT_BITS

__all__ = ["CoreController", "CORE_COUNTERS", "ATTENTION_COUNTERS", "ATTENTION_ERROR_BITS",
           "check_core_config"]

# The core's counters are its own, then the engine's summed over COMPUTEs and arrays.
assert CORE_COUNTERS[6:] == ARRAY_COUNTERS
# A core with the attention path adds P @ V's work counters, summed over attention blocks.
assert ATTENTION_COUNTERS == tuple(f"pv_{n}" for n in PV_COUNTERS if n != "cycles")

#: Bits of ``attention_error`` (a core with the attention path): what ended an attention
#: block with error 2. None is reachable from a program the decode accepts; they guard the
#: numerics' bounds in silicon.
ATTENTION_ERROR_BITS = {"score_range": 0, "softmax": 1, "weight": 2, "pv_start": 3, "p": 4}

#: Opcode bits [3:0] and opcode of each command name.
OPCODE_BITS = 4
OPCODES = {name: code for code, name in cmds.OPCODES.items()}
#: States of the controller (``docs/engine.md``, "Engine core").
ST = {name: i for i, name in enumerate(("IDLE", "GROUPS", "STRIDES", "LD_ADDR", "LD_WAIT", "CMP_START", "CMP_WAIT", "ST_REQ", "ST_DATA", "FENCE", "ERROR", "AT_READ", "AT_BLOCK"))}
#: Bits of the grid extents and origins in CONFIG and LOAD.
GRID_FIELD_BITS = 16


def check_core_config(config: KaleidoConfig):
    """Raise :class:`ConfigError` if the core cannot be built from ``config``."""
    n = config.engine_max_tokens
    if -(-n * n // 2) >= 1 << BEATS_WIDTH:
        raise ConfigError(f"engine_max_tokens must be at most 362 for the engine core (an S "
                          f"block is one DMA write of at most {(1 << BEATS_WIDTH) - 1} beats), "
                          f"got {n}")
    if config.core_attention:
        check_block_attention_config(config)
        if WRITE_BYTES % config.cols:
            raise ConfigError(f"core_attention needs cols in [1, 2, 4, 8] (a memory beat of V "
                              f"is whole words of cols channels), got cols = {config.cols}")
        # A score of int8 operands: at most 128 * 128 per channel.
        top = 128 * 128 * config.engine_max_head_dim
        if top >= 1 << (config.vector_score_bits - 1):
            raise ConfigError(f"core_attention needs vector_score_bits > "
                              f"{top.bit_length()} (an S of engine_max_head_dim = "
                              f"{config.engine_max_head_dim} int8 channels reaches {top}), got "
                              f"vector_score_bits = {config.vector_score_bits}")


def _fields(word, name: str) -> dict:
    """Slices of a 128-bit command ``word`` for command ``name`` (``golden.engine.commands``)."""
    return {f: word[lo:lo + width] for f, lo, width, _ in cmds.FIELDS[name]}


def _first_failure(checks) -> Value:
    """The code of the first failing ``(condition, code)`` check, 0 if none fails (the
    order of :func:`golden.engine.program.run_program`'s checks)."""
    code = Const(0, 4)
    for cond, c in reversed(checks):
        code = Mux(cond, c, code)
    return code


class CoreController(wiring.Component):
    """Command decoder, load/store walkers and the KaleidoEngine; the DMA is outside
    (:class:`kaleido_hw.engine.core_top.KaleidoCore` connects both).

    Parameters
    ----------
    config : KaleidoConfig
        The engine's keys (``docs/engine.md``).
    addr_width : int
        Bits of a memory byte address (the DMA's ``axi_addr_width``); memory beats are
        64 bits, one engine write each.

    Ports: ``cmd`` (128-bit command words, valid/ready), the DMA's request and data streams
    (``rd_req``, ``rd_data``, ``wr_req``, ``wr_data``), ``dma_error`` / ``dma_idle`` /
    ``dma_error_clear``, ``error_clear``, ``busy``, ``error`` (code of
    ``golden.engine.commands.ERROR_CODES``), ``error_command`` (index of the failing
    command, counted from 0 after reset), ``engine_error`` (the engine's error mask of a
    rejected COMPUTE), and ``cnt`` (:data:`CORE_COUNTERS`; with the attention path
    :data:`ATTENTION_COUNTERS` too, and ``attention_error``: :data:`ATTENTION_ERROR_BITS`).
    """

    def __init__(self, config: KaleidoConfig, addr_width: int = 32):
        check_core_config(config)
        self.config, self.addr_width = config, addr_width
        aw, dw = addr_width, 8 * WRITE_BYTES
        #: Scratchpad banks per side (``core_banks``, ``CoreLimits.banks``).
        self.banks = config.core_banks
        #: The attention path (``core_attention``): S rows with padding keys masked, the
        #: block datapath with a V bank per scratchpad bank, O packed into memory beats.
        #: With ``engine_pe = "reuse-pv"`` the engine's arrays run its P @ V too (one set of
        #: arrays with the P @ V mode, owned here: S in COMPUTE, P @ V while a block runs).
        self.attention = config.core_attention
        shared = self.attention and config.engine_pe == "reuse-pv"
        self.engine = KaleidoEngine(config, self.banks, shared_arrays=shared)
        self.arrays = []
        if self.attention:
            self.s_rows = SRowPacker(config, key_mask=True)
            self.block = BlockAttention(config, shared_arrays=shared, v_banks=self.banks)
            self.o_packer = OPacker(config)
        if shared:
            cls, _, _ = folded_array(config)
            tag_width = max(self.engine.array_views[0].tag_width,
                            self.block.array_views[0].tag_width)
            self.arrays = [cls(config, tag_width=tag_width) for _ in range(config.engine_arrays)]
        counters = CORE_COUNTERS + (ATTENTION_COUNTERS if self.attention else ())
        #: Most keys of an attention block (``CoreLimits.pv_keys``).
        self.pv_keys = pv_block_keys(config.acc_width)
        # Dispatcher blocks built, and a plain build: what CONFIG's reuse bits may ask for.
        self.built = (int(config.engine_dispatcher in ("scheduler", "full")),
                      int(config.engine_dispatcher in ("matcher", "full")),
                      int(config.engine_pe == "plain"))
        super().__init__({
            "cmd": In(stream.Signature(cmds.WORD_BITS)),
            "rd_req": Out(stream.Signature(request_layout(aw))),
            "rd_data": In(stream.Signature(data.StructLayout({"data": dw, "last": 1}))),
            "wr_req": Out(stream.Signature(request_layout(aw))),
            "wr_data": Out(stream.Signature(dw)),
            "dma_error": In(2),
            "dma_idle": In(1),
            "dma_error_clear": Out(1),
            "error_clear": In(1),
            "busy": Out(1),
            "error": Out(4),
            "error_command": Out(32),
            "engine_error": Out(8),
            **({"attention_error": Out(len(ATTENTION_ERROR_BITS))} if self.attention else {}),
            "cnt": Out(wiring.Signature({n: Out(COUNTER_WIDTH) for n in counters})),
        })

    def _v_writes(self, m, is_v, beat, taken, last_word, word, wrw, lane, head_dim):
        """A V LOAD's beats into the block datapath's V memory: ``8 / cols`` words of ``cols``
        channels each per beat, one per cycle (word w of beat ``lane`` is column block
        ``lane * 8 / cols + w``); a padding token's words are zeros, and so are channels past
        ``head_dim`` (the beat's bytes beyond them belong to the next token in memory).
        ``taken``: the beat's last word is written this cycle (``last_word`` marks it);
        ``word``: the word of the beat written next."""
        C = self.config.cols
        W = WRITE_BYTES // C
        vin = self.block.v_in
        m.d.comb += last_word.eq(word == W - 1)
        first_ch = Signal(range(self.config.engine_max_head_dim + WRITE_BYTES),
                          name="v_first_ch")
        m.d.comb += first_ch.eq(lane * WRITE_BYTES + word * C)
        data = self.rd_data.payload.data.word_select(word, 8 * C) if W > 1 else \
            self.rd_data.payload.data
        m.d.comb += [vin.valid.eq(is_v & beat),
                     vin.payload.cb.eq(lane * W + word), vin.payload.key.eq(wrw.tok),
                     vin.payload.v.eq(Mux(wrw.inside, Cat(*(
                         Mux(first_ch + j < head_dim, data[8 * j:8 * j + 8], 0)
                         for j in range(C))), 0)),
                     taken.eq(vin.valid & vin.ready & last_word)]
        with m.If(vin.valid & vin.ready):
            m.d.sync += word.eq(Mux(last_word, 0, word + 1))

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = eng = self.engine
        att = self.attention
        NS = 3 if att else 2                  # sides the scratchpad holds: Q, K (and V)
        geo = eng.geo
        t = geo.tile
        D, N = t.max_dim, t.max_tokens
        aw = self.addr_width
        sw = t.size_width
        E = {name: code for code, (name, _) in cmds.ERROR_CODES.items()}
        G = GRID_FIELD_BITS
        word = self.cmd.payload
        op = word[0:OPCODE_BITS]
        cnt = self.cnt
        fail = Signal()                       # the current command fails this cycle
        fail_code = Signal(4)
        cmd_index = Signal(32)                # index of the command being executed

        # -- state the commands set ------------------------------------------------------------
        box = [Signal(sw, name=f"box_{a}") for a in "thw"]
        grid = [Signal(G, name=f"grid_{a}") for a in "thw"]
        head_dim = Signal(t.dim_width)
        dirs, full_bits, half_bits = Signal(6), Signal(3), Signal(3)
        reuse, schedule, match = Signal(), Signal(), Signal()
        cmp_linear = Signal()                 # the COMPUTE is a linear block (kind 1)
        cmp_window3 = Signal()                # ... with windows of 3 (engine_window3 builds)
        cmp_acc = Signal()                    # ... and adds onto the unstored result
        regrouped = Signal()                  # a GROUPS ran since the last COMPUTE
        group_map = Signal(2 * D)
        assigned = Signal(D)                  # channel has a group since CONFIG
        # Strides per side: token (x), y, t; in bytes.
        strides = [[Signal(aw, name=f"stride_{'qkv'[sd]}_{a}") for a in "xyt"]
                   for sd in range(NS)]
        strides_set = Signal(NS)
        configured, pending = Signal(), Signal()
        B = self.banks
        loaded = Signal(NS * B)               # bank b of side s (bit s*B + b) holds a box

        def side_stride(sd, i):
            # Stride i (x, y, t) of side sd.
            if not att:
                return Mux(sd, strides[1][i], strides[0][i])
            return Mux(sd == cmds.SIDE_V, strides[2][i], Mux(sd[0], strides[1][i],
                                                              strides[0][i]))
        n_tok = Signal(3 * sw)                # tokens of one box
        m.d.comb += n_tok.eq(box[0] * box[1] * box[2])
        # The box's tokens, registered (CONFIG latches a box of at most N tokens): the S and
        # O beat counts are formed from it a stage later, so neither multiplier chain lies
        # in front of the STORE's beat compare and the S read-out's ready (10.5 ns on the
        # default build). Both are ready two cycles after CONFIG, long before a STORE reads
        # them: a COMPUTE stands between, and CONFIG is refused while a result is unstored.
        n_box = Signal(range(N + 1))
        m.d.sync += n_box.eq(n_tok)
        beats_per_token = Signal(t.dim_width)
        m.d.comb += beats_per_token.eq((head_dim + WRITE_BYTES - 1) >> 3)
        in_head = Signal(D)
        m.d.comb += in_head.eq(Cat(*(head_dim > c for c in range(D))))

        c = eng.cfg
        m.d.comb += [c.t.eq(box[0]), c.h.eq(box[1]), c.w.eq(box[2]), c.head_dim.eq(head_dim),
                     c.group_map.eq(group_map), c.directions.eq(dirs),
                     c.full_bits.eq(full_bits), c.half_bits.eq(half_bits), c.reuse.eq(reuse),
                     c.linear.eq(cmp_linear),
                     c.schedule.eq(schedule), c.match.eq(match)]
        if self.config.engine_window3:
            m.d.comb += c.window3.eq(cmp_window3)

        # -- sequential arithmetic: products by shift-and-add, remainders by restoring division,
        # one bit per cycle (a STRIDES or LOAD lasts 16 cycles more; a multiplier per product
        # would cost more than the whole load path).
        mul_c = [Signal(G, name=f"mul_c{i}") for i in range(3)]     # multipliers, LSB first
        mul_s = [Signal(64, name=f"mul_s{i}") for i in range(3)]    # multiplicands, shifted
        acc = [Signal(64, name=f"acc{i}") for i in range(2)]
        div_n = [Signal(G, name=f"div_n{i}") for i in range(3)]     # dividends, MSB first
        rem = [Signal(9, name=f"rem{i}") for i in range(3)]
        step = Signal(range(G + 1))
        arith = [
            *(mul_c[i].eq(mul_c[i] >> 1) for i in range(3)),
            *(mul_s[i].eq(mul_s[i] << 1) for i in range(3)),
            *(div_n[i].eq(div_n[i] << 1) for i in range(3)),
            step.eq(step + 1),
        ]
        for i in range(3):
            r2 = Cat(div_n[i][G - 1], rem[i])
            arith.append(rem[i].eq(Mux(r2 >= box[i], r2 - box[i], r2)))
        term = [Mux(mul_c[i][0], mul_s[i], 0) for i in range(3)]

        # -- load ---------------------------------------------------------------------------------
        # The controller decodes a LOAD and computes its origin's address (LD_ADDR), then
        # hands the walk to the load unit (ld_*), which runs while the controller goes on.
        side = Signal(2 if att else 1)        # side of the STRIDES / LOAD being decoded
        bank = Signal(range(B))               # bank of the LOAD being decoded
        addr_high = Signal()                  # LOAD address beyond axi_addr_width
        origin = [Signal(G, name=f"origin_{a}") for a in "thw"]
        rows = Signal()                       # the LOAD being decoded reads rows, not a box
        lim_next = [Signal(sw, name=f"lim_next_{a}") for a in "thw"]
        for i in range(3):
            room = grid[i] - origin[i]
            m.d.sync += lim_next[i].eq(Mux((room < box[i]) & ~rows, room, box[i]))
        ld_busy = Signal()                    # the load unit walks a box
        ld_side, ld_bank, ld_rows = Signal(2 if att else 1), Signal(range(B)), Signal()
        ld_index = Signal(32)                 # its LOAD's command index
        ld_err = Signal()                     # a DMA error ended the load unit's LOAD
        lim = [Signal(sw, name=f"lim_{a}") for a in "thw"]
        # One LOAD may wait for the load unit while it walks (its walk starts as the walk
        # before ends), so that the controller goes on to the next command instead of
        # waiting in LD_WAIT: a key box's K and V LOADs, back to back, then cost the
        # controller their decodes only.
        pend = SimpleNamespace(
            valid=Signal(name="pend_valid"), addr=Signal(aw, name="pend_addr"),
            side=Signal(2 if att else 1, name="pend_side"),
            bank=Signal(range(B), name="pend_bank"), rows=Signal(name="pend_rows"),
            index=Signal(32, name="pend_index"),
            lim=[Signal(sw, name=f"pend_lim_{a}") for a in "thw"])
        walking = ld_busy | pend.valid        # a LOAD's walk is not done
        req = BoxWalker(m, "req", sw, t.tok_width, aw)
        wrw = BoxWalker(m, "wrw", sw, t.tok_width)
        req.connect(box, lim)
        wrw.connect(box, lim)
        lane = Signal(t.dim_width)
        v_beat_taken, v_last_word = Signal(), Signal()    # a V beat's last word is written
        v_word = Signal(range(WRITE_BYTES // self.config.cols)) if att else None
        side_strides = [side_stride(ld_side, i) for i in range(3)]
        rr = self.rd_req.payload
        m.d.comb += [rr.addr.eq(req.addr), rr.beats.eq(beats_per_token)]

        def bank_bit(sd, b):
            # One-hot of bank b of side sd in ``loaded``.
            return Const(1, NS * B) << ((sd * B if att else Mux(sd, B, 0)) + b)

        def start_walk(addr, sd, bk, rw, limits, index):
            # The load unit takes a LOAD's walk.
            if att:
                m.d.sync += v_word.eq(0)
            m.d.sync += [*req.start(addr), *wrw.start(), lane.eq(0), ld_busy.eq(1),
                         ld_side.eq(sd), ld_bank.eq(bk), ld_rows.eq(rw), ld_index.eq(index),
                         *(lim[i].eq(limits[i]) for i in range(3))]

        cmp_bank = [Signal(range(B), name=f"cmp_{s}_bank") for s in "qkv"[:NS]]  # COMPUTE's

        # -- groups -------------------------------------------------------------------------------
        g_first = Signal(9)
        g_count = Signal(6)
        g_bits = Signal(2 * cmds.GROUPS_PER_WORD)
        g_i = Signal(6)

        # -- store --------------------------------------------------------------------------------
        s = eng.s
        s_total = Signal(6 * sw)              # beats of the block
        s_count = Signal(6 * sw)
        draining = Signal()                   # the engine's S read-out is not finished
        base = Signal(aw)
        m.d.sync += s_total.eq((n_box * n_box + 1) >> 1)
        s_fire = s.valid & s.ready
        with m.If(s_fire):
            m.d.sync += s_count.eq(s_count + 1)
            with m.If(s_count + 1 == s_total):
                m.d.sync += draining.eq(0)

        # -- attention ------------------------------------------------------------------------------
        # ATTENTION's fields; the open query box and the unstored O; the COMPUTE's kind 2
        # flags; which keys of each K bank are tokens of the grid (the rest are padding).
        open_box, pending_o = Signal(), Signal()
        storing_o = Signal()                  # the STORE running writes O
        # A block's softmax and P @ V run on after its COMPUTE has ended (the S read-out
        # done): blk_running to its partials in the output unit (after a last block: O
        # ready to leave); blk_err, a block datapath error found then.
        blk_running, blk_err = Signal(), Signal()
        cmp_pv, cmp_first, cmp_last = Signal(), Signal(), Signal()
        if att:
            blk = self.block
            blk_reset = Signal()              # leaving the error state: drop a block's state
            m.submodules.s_rows = ResetInserter(blk_reset)(self.s_rows)
            m.submodules.block = ResetInserter(blk_reset)(blk)
            m.submodules.o_packer = ResetInserter(blk_reset)(self.o_packer)
            a_mult, a_shift = Signal(MULT_BITS), Signal(SHIFT_BITS)
            a_dir, a_window3, a_reuse, a_set = Signal(2), Signal(), Signal(), Signal()
            k_real = [Signal(N, name=f"k_real{b}") for b in range(B)]
            o_total = Signal(range(1 << BEATS_WIDTH))      # memory beats of an O
            m.d.sync += o_total.eq(o_beats(n_box, head_dim))
            bc = blk.cfg
            m.d.comb += [bc.t.eq(box[0]), bc.h.eq(box[1]), bc.w.eq(box[2]),
                         bc.channels.eq(head_dim), bc.mult.eq(a_mult), bc.shift.eq(a_shift),
                         bc.axis.eq(a_dir), bc.window.eq(Mux(a_window3, 3, 2)),
                         bc.reuse.eq(a_reuse), bc.full_bits.eq(full_bits),
                         bc.half_bits.eq(half_bits), blk.first.eq(cmp_first),
                         blk.last.eq(cmp_last)]
            if B > 1:
                m.d.comb += [bc.v_bank.eq(cmp_bank[2]), blk.v_in_bank.eq(ld_bank)]
            sr = self.s_rows
            m.d.comb += [sr.cfg.keys.eq(n_tok), sr.cfg.mult.eq(a_mult), sr.cfg.shift.eq(a_shift),
                         sr.cfg.real.eq(Array(k_real)[cmp_bank[1]] if B > 1 else k_real[0])]
            wiring.connect(m, sr.o, blk.s)
            opk = self.o_packer
            wiring.connect(m, blk.out, opk.i)
            m.d.comb += [opk.cfg.rows.eq(n_tok), opk.cfg.channels.eq(head_dim)]
            att_errors = Cat(sr.error, blk.error.softmax, blk.error.weight, blk.error.pv != 0,
                             blk.error.p != 0)
            assert len(att_errors) == len(ATTENTION_ERROR_BITS)

        # The controller's state, decoded by an If chain (an m.FSM or m.Switch of 11 states
        # emits incomplete cases, which Verilator -Wall rejects).
        state = Signal(range(len(ST)), name="core_state")

        def goto(name):
            m.d.sync += state.eq(ST[name])

        def stop_on_fail(dma=True):
            # A failed command, or an AXI error the DMA reports (a write response may come
            # back after its STORE ended), stops execution; a compute always runs to its end
            # so that the engine is idle when the error state is left.
            if dma:
                with m.If(self.dma_error != 0):
                    m.d.comb += [fail.eq(1), fail_code.eq(E["out_of_range"])]
                if att:
                    # A block that ended with an error in the background: error 2 of the
                    # command executing (as an AXI write error after its STORE).
                    with m.Elif(blk_err):
                        m.d.comb += [fail.eq(1), fail_code.eq(E["bad_config"])]
            with m.If(fail):
                m.d.sync += state.eq(ST["ERROR"])

        def check(checks, ok):
            code = Signal(4, name="check_code")
            m.d.comb += code.eq(_first_failure(checks))
            with m.If(code != 0):
                m.d.comb += [fail.eq(1), fail_code.eq(code)]
            with m.Else():
                ok()

        def high_bits(v):
            # Address bits beyond the AXI address: past the end of any memory.
            return v[aw:] != 0 if len(v) > aw else Const(0)

        # A command held in IDLE until the load unit is done: CONFIG, STRIDES (they change what
        # it walks), STORE (no store runs while an earlier LOAD may still fail: the
        # interpreter's memory), and a COMPUTE that reads the bank being loaded.
        fc = _fields(word, "COMPUTE")

        def conflict(sd, bk):
            # The COMPUTE being decoded reads bank bk of side sd.
            if att:
                # A V walk conflicts with an attention block reading its bank.
                return Mux(sd == cmds.SIDE_V,
                           (fc["kind"] == cmds.KIND_PV) & (fc["v_bank"] == bk),
                           Mux(sd[0], fc["k_bank"] == bk, fc["q_bank"] == bk))
            return Mux(sd, fc["k_bank"] == bk, fc["q_bank"] == bk)
        hold = Signal()
        m.d.comb += hold.eq((walking & ((op == OPCODES["CONFIG"]) | (op == OPCODES["STRIDES"])
                                        | (op == OPCODES["STORE"])))
                            | ((op == OPCODES["COMPUTE"])
                               & ((ld_busy & conflict(ld_side, ld_bank))
                                  | (pend.valid & conflict(pend.side, pend.bank)))))

        with m.If(state == ST["IDLE"]):
            m.d.comb += self.cmd.ready.eq(~hold)
            with m.If(self.cmd.valid & ~hold):
                m.d.sync += [cnt.commands.eq(cnt.commands + 1), cmd_index.eq(cnt.commands)]
                with m.If(op == OPCODES["CONFIG"]):
                    f = _fields(word, "CONFIG")
                    d3 = [f[n] for n in ("dir_t", "dir_y", "dir_x")]
                    ext = [f[n] for n in ("box_t", "box_h", "box_w", "grid_t", "grid_h",
                                          "grid_w")]
                    built_s, built_m, plain = self.built
                    not_built = f["reuse"] & ((f["schedule"] & ~Const(built_s))
                                              | (f["match"] & ~Const(built_m))
                                              | Const(plain))

                    def latch():
                        if att:
                            m.d.sync += a_set.eq(0)
                        m.d.sync += [configured.eq(1), loaded.eq(0), strides_set.eq(0),
                                     assigned.eq(0), head_dim.eq(f["head_dim"]),
                                     dirs.eq(Cat(*d3)), full_bits.eq(f["full_bits"]),
                                     half_bits.eq(f["half_bits"]), reuse.eq(f["reuse"]),
                                     schedule.eq(f["schedule"]), match.eq(f["match"])]
                        m.d.sync += [box[i].eq(ext[i]) for i in range(3)]
                        m.d.sync += [grid[i].eq(ext[3 + i]) for i in range(3)]
                    check([
                        (word & ~cmds.used_mask("CONFIG") != 0, E["malformed"]),
                        (pending, E["result_pending"]),
                        *([(open_box, E["result_pending"])] if att else []),
                        (Cat(*(e == 0 for e in ext)).any(), E["bad_config"]),
                        (ext[0] * ext[1] * ext[2] > N, E["bad_config"]),
                        ((f["head_dim"] == 0) | (f["head_dim"] > D), E["bad_config"]),
                        (Cat(*(d == 3 for d in d3)).any(), E["bad_config"]),
                        (f["full_bits"] == 0, E["bad_config"]),
                        ((f["half_bits"] < 3) | (f["half_bits"] >= f["full_bits"]),
                         E["bad_config"]),
                        (not_built, E["bad_config"]),
                    ], latch)
                with m.Elif(op == OPCODES["GROUPS"]):
                    f = _fields(word, "GROUPS")
                    n = f["count"]
                    # A signal: slicing a Cat expression re-emits all of its terms.
                    keep = Signal(cmds.GROUPS_PER_WORD)
                    m.d.comb += keep.eq(Cat(*(n > i for i in range(cmds.GROUPS_PER_WORD))))
                    gs = [f["groups"][2 * i:2 * i + 2] for i in range(cmds.GROUPS_PER_WORD)]
                    past = Cat(*(~keep[i] & (gs[i] != 0)
                                 for i in range(cmds.GROUPS_PER_WORD))).any()

                    def start_groups():
                        m.d.sync += [g_first.eq(f["first"]), g_count.eq(n),
                                     g_bits.eq(f["groups"]), g_i.eq(0), regrouped.eq(1)]
                        m.d.sync += state.eq(ST["GROUPS"])
                    check([
                        (word & ~cmds.used_mask("GROUPS") != 0, E["malformed"]),
                        ((n == 0) | (n > cmds.GROUPS_PER_WORD) | past, E["malformed"]),
                        (~configured, E["not_configured"]),
                        (f["first"] + n > head_dim, E["bad_config"]),
                        (Cat(*(keep[i] & (gs[i] == 3)
                               for i in range(cmds.GROUPS_PER_WORD))).any(),
                         E["bad_config"]),
                    ], start_groups)
                with m.Elif(op == OPCODES["STRIDES"]):
                    f = _fields(word, "STRIDES")
                    vals = [f["token_stride"], f["y_stride"], f["t_stride"]]

                    def start_strides():
                        m.d.sync += [side.eq(f["side"]), step.eq(0),
                                     mul_c[0].eq(grid[2]), mul_c[1].eq(grid[1]),
                                     mul_c[2].eq(0), acc[0].eq(0), acc[1].eq(0),
                                     mul_s[0].eq(vals[0]), mul_s[1].eq(vals[1]),
                                     mul_s[2].eq(0)]
                        for i in range(3):
                            m.d.sync += [strides[k][i].eq(Mux(f["side"] == k, vals[i],
                                                              strides[k][i]))
                                         for k in range(NS)]
                        m.d.sync += state.eq(ST["STRIDES"])
                    check([
                        (word & ~cmds.used_mask("STRIDES") != 0, E["malformed"]),
                        (f["side"] == 3, E["malformed"]),
                        *([] if att else [(f["side"] == cmds.SIDE_V, E["unsupported"])]),
                        (~configured, E["not_configured"]),
                        (Cat(*(v[0:4] != 0 for v in vals)).any(), E["misaligned"]),
                    ], start_strides)
                with m.Elif(op == OPCODES["LOAD"]):
                    f = _fields(word, "LOAD")
                    org = [f["origin_t"], f["origin_h"], f["origin_w"]]
                    sd = f["side"] if att else f["side"][0]

                    def start_load():
                        m.d.sync += [side.eq(sd), bank.eq(f["bank"]), step.eq(0), addr_high.eq(
                                     high_bits(f["address"])), rows.eq(f["rows"]),
                                     acc[0].eq(f["address"][:aw])]
                        for i in range(3):
                            m.d.sync += [origin[i].eq(org[i]), mul_c[i].eq(org[i]),
                                         div_n[i].eq(org[i]), rem[i].eq(0)]
                        # origin (t, y, x) times the side's (t, y, x) strides
                        for i, k in enumerate((2, 1, 0)):
                            m.d.sync += mul_s[i].eq(side_stride(sd, k))
                        m.d.sync += state.eq(ST["LD_ADDR"])
                    check([
                        (word & ~cmds.used_mask("LOAD") != 0, E["malformed"]),
                        (f["side"] == 3, E["malformed"]),
                        *([] if att else [(f["side"] == cmds.SIDE_V, E["unsupported"])]),
                        (~configured, E["not_configured"]),
                        (f["bank"] >= B, E["bad_bank"]),
                        (~strides_set.bit_select(sd, 1), E["not_configured"]),
                        (f["address"][0:4] != 0, E["misaligned"]),
                        *([(f["rows"] & (f["side"] == cmds.SIDE_V), E["bad_origin"])]
                          if att else []),
                    ], start_load)
                with m.Elif(op == OPCODES["COMPUTE"]):
                    f = fc

                    pv = f["kind"] == cmds.KIND_PV

                    def start_compute():
                        m.d.sync += [cmp_bank[0].eq(f["q_bank"]), cmp_bank[1].eq(f["k_bank"]),
                                     cmp_linear.eq(f["kind"] == cmds.KIND_LINEAR),
                                     *([cmp_window3.eq(f["window3"])]
                                       if self.config.engine_window3 else []),
                                     cmp_acc.eq(f["acc"]), regrouped.eq(0)]
                        if att:
                            m.d.sync += [cmp_bank[2].eq(f["v_bank"]), cmp_pv.eq(pv),
                                         cmp_first.eq(f["first"]), cmp_last.eq(f["last"])]
                        goto("CMP_START")
                    # An attention block's checks beyond every COMPUTE's, in the
                    # interpreter's order (golden.engine.program, _check_attention).
                    pv_checks = [
                        (pv & (f["v_bank"] >= B), E["bad_bank"]),
                        (pv & ((loaded & bank_bit(cmds.SIDE_V, f["v_bank"])) == 0),
                         E["bank_empty"]),
                    ] if att else []
                    open_checks = [
                        (pv & ~a_set, E["not_configured"]),
                        (pv & f["first"] & pending, E["result_pending"]),
                        (pv & f["first"] & open_box, E["result_pending"]),
                        (pv & ~f["first"] & ~open_box, E["no_result"]),
                        (pv & (n_tok > self.pv_keys), E["bad_config"]),
                        (~pv & open_box, E["result_pending"]),
                    ] if att else []
                    check([
                        (word & ~cmds.used_mask("COMPUTE") != 0, E["malformed"]),
                        (f["kind"] > 2, E["malformed"]),
                        ((f["kind"] != cmds.KIND_PV)
                         & (f["v_bank"].any() | f["first"] | f["last"]), E["malformed"]),
                        ((f["kind"] == cmds.KIND_PV) & f["acc"], E["malformed"]),
                        ((f["kind"] != cmds.KIND_LINEAR) & f["window3"], E["malformed"]),
                        (~configured, E["not_configured"]),
                        *([] if att else [(f["kind"] == cmds.KIND_PV, E["unsupported"])]),
                        (f["q_bank"] >= B, E["bad_bank"]),
                        ((loaded & bank_bit(0, f["q_bank"])) == 0, E["bank_empty"]),
                        (f["k_bank"] >= B, E["bad_bank"]),
                        ((loaded & bank_bit(1, f["k_bank"])) == 0, E["bank_empty"]),
                        *pv_checks,
                        ((assigned | ~in_head) != (1 << D) - 1, E["not_configured"]),
                        *open_checks,
                        # (a window-3 block with schedule or match: the engine rejects it)
                        *([] if self.config.engine_window3
                          else [(f["window3"], E["unsupported"])]),
                        (f["acc"] & ~pending, E["no_result"]),
                        *([(f["acc"] & pending_o, E["no_result"])] if att else []),
                        (~f["acc"] & pending, E["result_pending"]),
                        (f["acc"] & regrouped, E["result_pending"]),
                    ], start_compute)
                with m.Elif(op == OPCODES["STORE"]):
                    f = _fields(word, "STORE")

                    def start_store():
                        m.d.sync += [base.eq(f["address"][:aw]), s_count.eq(0)]
                        m.d.sync += state.eq(ST["ST_REQ"])
                    check([
                        (word & ~cmds.used_mask("STORE") != 0, E["malformed"]),
                        (~configured, E["not_configured"]),
                        (f["address"][0:4] != 0, E["misaligned"]),
                        (~pending, E["no_result"]),
                        (high_bits(f["address"]), E["out_of_range"]),
                    ], start_store)
                with m.Elif(op == OPCODES["FENCE"]):
                    check([(word & ~cmds.used_mask("FENCE") != 0, E["malformed"])],
                          lambda: goto("FENCE"))
                with m.Elif(op == OPCODES["ATTENTION"]):
                    if att:
                        f = _fields(word, "ATTENTION")

                        def latch_attention():
                            m.d.sync += [a_mult.eq(f["scale_mult"]), a_shift.eq(f["scale_shift"]),
                                         a_dir.eq(f["v_dir"]), a_window3.eq(f["v_window3"]),
                                         a_reuse.eq(f["v_reuse"]), a_set.eq(1)]
                        check([(word & ~cmds.used_mask("ATTENTION") != 0, E["malformed"]),
                               (~configured, E["not_configured"]),
                               (open_box, E["result_pending"]),
                               (f["scale_mult"] < MULT_MIN, E["bad_config"]),
                               ((f["scale_shift"] < SHIFT_MIN) | (f["scale_shift"] > SHIFT_MAX),
                                E["bad_config"]),
                               (f["v_dir"] == 3, E["bad_config"]),
                               (f["v_reuse"] & Const(self.built[2]), E["bad_config"]),
                               ], latch_attention)
                    else:
                        # This core has no attention path (``CoreLimits.attention`` False).
                        check([(word & ~cmds.used_mask("ATTENTION") != 0, E["malformed"]),
                               (Const(1), E["unsupported"])], lambda: None)
                with m.Else():
                    m.d.comb += [fail.eq(1), fail_code.eq(E["malformed"])]
            stop_on_fail()

        with m.Elif(state == ST["GROUPS"]):
            # One channel per cycle: a 2-bit write at a run-time position costs a decoder,
            # where a one-cycle update would shift the whole map.
            ch = Signal(9)
            m.d.comb += ch.eq(g_first + g_i)
            g = g_bits.word_select(g_i, 2)
            for cc in range(D):
                with m.If(ch == cc):
                    m.d.sync += [group_map[2 * cc:2 * cc + 2].eq(g), assigned[cc].eq(1)]
            m.d.sync += g_i.eq(g_i + 1)
            with m.If(g_i + 1 == g_count):
                m.d.sync += state.eq(ST["IDLE"])

        with m.Elif(state == ST["STRIDES"]):
            m.d.sync += arith
            m.d.sync += [acc[0].eq(acc[0] + term[0]), acc[1].eq(acc[1] + term[1])]
            with m.If(step == G):
                # grid_w * token_stride and grid_h * y_stride are complete.
                vals = [side_stride(side, i) for i in range(3)]
                check([
                    (vals[0] < head_dim, E["bad_strides"]),
                    (vals[1] < acc[0], E["bad_strides"]),
                    (vals[2] < acc[1], E["bad_strides"]),
                ], lambda: None)
                with m.If(~fail):
                    m.d.sync += strides_set.eq(strides_set | (Const(1, NS) << side))
                    m.d.sync += state.eq(ST["IDLE"])
            stop_on_fail(dma=False)

        with m.Elif(state == ST["LD_ADDR"]):
            m.d.sync += arith
            m.d.sync += acc[0].eq(acc[0] + term[0] + term[1] + term[2])
            with m.If(step == G):
                # A rows LOAD takes no origin: the box's checks do not apply to it.
                bad = Mux(rows, Cat(*origin).any(),
                          Cat(*((rem[i] != 0) | (origin[i] >= grid[i]) for i in range(3))).any())
                with m.If(bad):
                    m.d.comb += [fail.eq(1), fail_code.eq(E["bad_origin"])]
                with m.Elif(addr_high):
                    m.d.comb += [fail.eq(1), fail_code.eq(E["out_of_range"])]
                with m.Else():
                    m.d.sync += state.eq(ST["LD_WAIT"])
            stop_on_fail()

        with m.Elif(state == ST["LD_WAIT"]):
            # Hand the walk to the load unit once it is free and no write is in flight (an
            # AXI error while the load unit walks is then its LOAD's), or, while it walks,
            # queue it when the queue is free.
            with m.If(~walking & self.dma_idle):
                start_walk(acc[0][:aw], side, bank, rows, lim_next, cmd_index)
                m.d.sync += [loaded.eq(loaded | bank_bit(side, bank)), state.eq(ST["IDLE"])]
            with m.Elif(ld_busy & ~pend.valid):
                m.d.sync += [pend.valid.eq(1), pend.addr.eq(acc[0][:aw]), pend.side.eq(side),
                             pend.bank.eq(bank), pend.rows.eq(rows), pend.index.eq(cmd_index),
                             *(pend.lim[i].eq(lim_next[i]) for i in range(3)),
                             loaded.eq(loaded | bank_bit(side, bank)), state.eq(ST["IDLE"])]
            stop_on_fail()

        with m.Elif(state == ST["CMP_START"]):
            def start_engine():
                m.d.comb += [eng.start.eq(1), eng.accumulate.eq(cmp_acc)]
                m.d.sync += state.eq(ST["CMP_WAIT"])
            if self.arrays:
                # Shared arrays: once the block before has left them.
                with m.If(~blk_running):
                    start_engine()
            else:
                start_engine()

        with m.Elif(state == ST["CMP_WAIT"]):
            with m.If(eng.done):
                with m.If(eng.error != 0):
                    # A check the CONFIG decode does not repeat (group_size).
                    m.d.sync += self.engine_error.eq(eng.error)
                    m.d.comb += [fail.eq(1), fail_code.eq(E["bad_config"])]
                with m.Else():
                    m.d.sync += [cnt.engine_cycles.eq(cnt.engine_cycles + eng.cnt.cycles),
                                 cnt.chunks.eq(cnt.chunks + eng.cnt.chunks)]
                    for name in ARRAY_COUNTERS:
                        total = sum(getattr(getattr(eng.cnt, f"a{a}"), name)
                                    for a in range(geo.arrays))
                        mine = getattr(cnt, name)
                        m.d.sync += mine.eq(mine + total)
                    if att:
                        with m.If(cmp_pv):
                            # An attention block: its S goes on into the block datapath.
                            m.d.sync += state.eq(ST["AT_READ"])
                        with m.Else():
                            m.d.sync += [pending.eq(1), state.eq(ST["IDLE"])]
                    else:
                        m.d.sync += [pending.eq(1), state.eq(ST["IDLE"])]
            stop_on_fail(dma=False)

        if att:
            with m.Elif(state == ST["AT_READ"]):
                # Once the block before has left the block datapath (its P @ V done; after
                # a last block, O stored): start the S read-out, the row packer and the block.
                with m.If(~blk.busy):
                    m.d.comb += [eng.read.eq(1), sr.start.eq(1), blk.start.eq(1)]
                    m.d.sync += [blk_running.eq(1), state.eq(ST["AT_BLOCK"])]

            with m.Elif(state == ST["AT_BLOCK"]):
                # S rows through the row packer into the softmax, to the last row: then the
                # COMPUTE ends, and the block's softmax and P @ V go on while the next
                # commands run (the next block's S on the engine, its K and V loads).
                m.d.comb += [sr.s.valid.eq(s.valid), sr.s.payload.eq(s.payload),
                             s.ready.eq(sr.s.ready)]
                with m.If(sr.done):
                    m.d.sync += [open_box.eq(~cmp_last), pending.eq(cmp_last),
                                 pending_o.eq(cmp_last), state.eq(ST["IDLE"])]
                stop_on_fail(dma=False)

        with m.Elif(state == ST["ST_REQ"]):
            wq = self.wr_req.payload
            # An O's write request waits until the last block has made O (the burst is not
            # opened thousands of cycles before its data).
            ask = ~(pending_o & blk_running) if att else Const(1)
            m.d.comb += [self.wr_req.valid.eq(ask), wq.addr.eq(base),
                         wq.beats.eq(Mux(pending_o, o_total, s_total) if att else s_total)]
            with m.If(self.wr_req.ready & ask if att else self.wr_req.ready):
                m.d.sync += pending.eq(0)
                if att:
                    m.d.sync += [pending_o.eq(0), storing_o.eq(pending_o)]
                    with m.If(~pending_o):
                        m.d.comb += eng.read.eq(1)
                        m.d.sync += draining.eq(1)
                else:
                    m.d.comb += eng.read.eq(1)
                    m.d.sync += draining.eq(1)
                m.d.sync += state.eq(ST["ST_DATA"])
            stop_on_fail()

        with m.Elif(state == ST["ST_DATA"]):
            # The engine's read-out beats are the memory's (two S values, the first in the
            # low half; an odd count ends with a zero high half): forward them. O's beats
            # come packed from the block datapath (four int16 a beat).
            wd = self.wr_data
            if att:
                o_left = storing_o & (s_count != o_total)
                with m.If(o_left):
                    m.d.comb += [wd.valid.eq(opk.o.valid), wd.payload.eq(opk.o.payload),
                                 opk.o.ready.eq(wd.ready)]
                    with m.If(wd.valid & wd.ready):
                        m.d.sync += s_count.eq(s_count + 1)
                with m.Elif(storing_o):
                    m.d.sync += state.eq(ST["IDLE"])
            with m.Elif(s_count != s_total) if att else m.If(s_count != s_total):
                m.d.comb += [wd.valid.eq(s.valid), wd.payload.eq(s.payload),
                             s.ready.eq(wd.ready)]
            with m.Else():
                m.d.sync += state.eq(ST["IDLE"])
            stop_on_fail()

        with m.Elif(state == ST["FENCE"]):
            with m.If(self.dma_idle & ~walking & ~blk_running if att else
                      self.dma_idle & ~walking):
                m.d.sync += state.eq(ST["IDLE"])
            stop_on_fail()

        with m.Elif(state == ST["ERROR"]):
            # Drop commands; drain what is in flight so that the next run starts clean.
            # A load handed off before the failing command runs to its end (or to a DMA
            # error, which then names it: the earlier command).
            m.d.comb += [self.cmd.ready.eq(1), s.ready.eq(draining),
                         self.dma_error_clear.eq(self.error_clear & ~ld_busy)]
            with m.If(self.error_clear & ~draining & self.dma_idle & ~walking):
                m.d.sync += [self.error.eq(0), self.engine_error.eq(0), loaded.eq(0),
                             pending.eq(0), ld_err.eq(0)]
                if att:
                    # The block datapath's state (an open box, an O not stored, a block
                    # running) is dropped.
                    m.d.comb += blk_reset.eq(1)
                    m.d.sync += [self.attention_error.eq(0), open_box.eq(0), pending_o.eq(0),
                                 blk_running.eq(0), blk_err.eq(0)]
                m.d.sync += state.eq(ST["IDLE"])

        with m.Else():
            goto("ERROR")                   # unreachable encodings

        with m.If(fail & ~ld_err):
            # cmd_index is updated at this edge for a command accepted now.
            m.d.sync += [self.error.eq(fail_code),
                         self.error_command.eq(Mux((state == ST["IDLE"]), cnt.commands,
                                                   cmd_index))]

        # -- the load unit: request and write walkers of the LOAD handed off -----------------------
        dma_ok = self.dma_error == 0
        with m.If(ld_busy):
            with m.If(~req.done & dma_ok):
                with m.If(req.inside):
                    m.d.comb += self.rd_req.valid.eq(1)
                    with m.If(self.rd_req.ready):
                        req.advance(side_strides, ld_rows)
                with m.Else():
                    req.advance(side_strides, ld_rows)
            wr = eng.wr
            take = Signal()
            m.d.comb += [wr.sel.eq(ld_side), wr.token.eq(wrw.tok), wr.lane.eq(lane),
                         wr.en.eq(take & (ld_side != cmds.SIDE_V) if att else take)]
            if B > 1:
                m.d.comb += wr.bank.eq(ld_bank)
            beat = Signal()                         # this cycle's beat is there to write
            with m.If(~wrw.done):
                with m.If(wrw.inside):
                    m.d.comb += [wr.data.eq(self.rd_data.payload.data),
                                 beat.eq(self.rd_data.valid)]
                with m.Else():
                    m.d.comb += beat.eq(1)          # padding: zeros, nothing fetched
            if att:
                m.d.comb += take.eq(Mux(ld_side == cmds.SIDE_V, v_beat_taken, beat))
                self._v_writes(m, ld_side == cmds.SIDE_V, beat, v_beat_taken, v_last_word,
                               v_word, wrw, lane, head_dim)
                with m.If(take & (ld_side == cmds.SIDE_K)):
                    for b in range(B):
                        with m.If(ld_bank == b):
                            m.d.sync += k_real[b].bit_select(wrw.tok, 1).eq(wrw.inside)
            else:
                m.d.comb += take.eq(beat)
            with m.If(take):
                with m.If(lane + 1 == beats_per_token):
                    m.d.sync += lane.eq(0)
                    wrw.advance()
                with m.Else():
                    m.d.sync += lane.eq(lane + 1)
            with m.If(wrw.done):
                m.d.sync += ld_busy.eq(0)
            with m.If(~dma_ok):
                # Its read failed (no write is in flight while it walks): error 12 names its
                # LOAD, which precedes every command decoded since, failed or not; a queued
                # LOAD after it is dropped.
                m.d.sync += [ld_busy.eq(0), ld_err.eq(1), self.error.eq(E["out_of_range"]),
                             self.error_command.eq(ld_index), pend.valid.eq(0)]
        # The queued walk starts as the load unit comes free (in any state: its LOAD
        # precedes a command that failed since, and its own AXI error would replace that
        # one). No write is in flight then: STOREs wait for every walk.
        with m.If(pend.valid & ~ld_busy & self.dma_idle & dma_ok):
            start_walk(pend.addr, pend.side, pend.bank, pend.rows, pend.lim, pend.index)
            m.d.sync += pend.valid.eq(0)
        # The write walker takes the beats of its inside tokens; the error state drops the
        # beats of a walk a DMA error ended. (Low otherwise, as the DMA's R channel expects
        # of an idle consumer.)
        taking = ~wrw.done & wrw.inside
        if att:
            # A beat of V leaves with its last word.
            taking = taking & ((ld_side != cmds.SIDE_V) | (v_last_word & self.block.v_in.ready))
        m.d.comb += self.rd_data.ready.eq(Mux(ld_busy, taking, state == ST["ERROR"]))

        if B > 1:
            m.d.comb += [eng.q_bank.eq(cmp_bank[0]), eng.k_bank.eq(cmp_bank[1])]

        if att:
            # A running block's end: its P @ V's counters into the core's, its errors
            # checked (error 2 with attention_error; the decode makes them unreachable).
            with m.If(blk_running & (blk.done | blk.out.valid) & ~blk_reset):
                m.d.sync += blk_running.eq(0)
                with m.If(att_errors != 0):
                    m.d.sync += [self.attention_error.eq(att_errors), blk_err.eq(1)]
                for name in ATTENTION_COUNTERS:
                    mine = getattr(cnt, name)
                    m.d.sync += mine.eq(mine + getattr(blk.cnt.pv, name[3:]))
        # Shared arrays: the engine's steps in a COMPUTE (its run has ended with its last
        # drain wave before AT_READ, and the next one starts when the block has ended), the
        # block datapath's P @ V while a block runs.
        for a, arr in enumerate(self.arrays):
            m.submodules[f"array{a}"] = arr
            share_array(m, arr, [eng.array_views[a], self.block.array_views[a]], blk_running)

        executing = ~(state == ST["IDLE"]) & ~(state == ST["ERROR"])
        computing = (state == ST["CMP_START"]) | (state == ST["CMP_WAIT"])
        if att:
            # A block's softmax and P @ V count as compute after its COMPUTE has ended too.
            computing = (computing | (state == ST["AT_READ"]) | (state == ST["AT_BLOCK"])
                         | blk_running)
            executing = executing | blk_running
        # A cycle counts from a command's arrival (its decode cycle) until the core, load
        # unit (and block datapath) included, is idle.
        running = executing | walking | ((state == ST["IDLE"]) & self.cmd.valid)
        m.d.comb += self.busy.eq(executing | walking)
        m.d.sync += [cnt.cycles.eq(cnt.cycles + running),
                     cnt.compute.eq(cnt.compute + computing),
                     cnt.mem_wait.eq(cnt.mem_wait + (running & ~computing))]
        return m
