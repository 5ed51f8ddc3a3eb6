"""The attention engine's command part: takes a command, checks it, loads B, V and the
column vector (or drops a refused command's beats), and holds the command state every other
part runs from."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ...lib import KEEP_COPY, stepped_counter
from .common import SPAN_BITS, EngineShape, Kind, Part, StateSignature, mem_addr

__all__ = ["EngineCommand"]


class EngineCommand(wiring.Component):
    """Command intake and operand load.

    A command on ``i_cmd`` is taken in IDLE (its fields, kind flags, sizes less one and two
    and checks load into registers every idle cycle, the last load being the command taken),
    checked in CHECK (one cycle), then either dropped (DROP: its operand beats, as its sizes
    imply, consumed from ``i_b``, ``i_bias`` and, through ``a_drop``, A's stream; ``err``
    set with ``err_code``, ``refuse`` for a cycle) or loaded: the biases or counts (BIAS,
    one word a beat), B's rows (LOAD_B, a beat a cycle, one memory per row residue), V's
    (LOAD_V; with ``pairs`` the two alternate a token at a time). RUN sets ``st.start`` until
    the feeder, the output and the score side say done, then back to IDLE. The writes go
    through a register stage: a write lands a cycle after its beat, the last one the cycle
    after ``start``, long before any read of it.

    Latency: a command's check costs a cycle; every load beat one cycle, no bubble."""

    def __init__(self, shape: EngineShape, *, cmd_layout, chunk_layout, bias_layout,
                 k_max_score: int):
        self._sh, self._k_max_score = shape, k_max_score
        word = data.ArrayLayout(signed(8), shape.n)
        b_depth = shape.row_words * shape.kc_max
        super().__init__({
            "i_cmd": In(stream.Signature(cmd_layout)),
            "i_b": In(stream.Signature(chunk_layout)),
            "i_bias": In(stream.Signature(bias_layout)),
            "a_valid": In(1), "a_drop": Out(1),
            "b_wr": In(memory.WritePort.Signature(addr_width=ceil_log2(b_depth),
                                                  shape=word)).array(shape.n),
            "v_wr": In(memory.WritePort.Signature(
                addr_width=ceil_log2(shape.b_rows * shape.vc_max), shape=word)),
            "bias_wr": In(memory.WritePort.Signature(
                addr_width=ceil_log2(shape.bias_words),
                shape=data.ArrayLayout(signed(shape.acc_bits), shape.n))),
            "st": Out(StateSignature(cmd_layout)),
            "score_pk": Out(1), "score_exp": Out(1),
            "feed_done": In(1), "out_done": In(1), "score_done": In(1),
            "refuse": Out(1), "err": Out(1), "err_code": Out(2),
        })

    def _decode(self, m, idle):
        """The command's kind and part decoded, its sizes less one and two and its checks,
        into registers loaded with the command every idle cycle (their enables do not wait
        for the stream's valid: for the clock; nothing reads them before CHECK, the engine
        being idle). Returns the check registers (``ck``, ``ck_err``) and the drop limits."""
        sh, st, p, n = self._sh, self.st, self.i_cmd.payload, self._sh.n
        # the decoders had sat in front of the handshakes and enables: for the clock
        attend_p = p.kind == Kind.ATTEND
        k_only_p = (p.part == Part.MAX) & ~p.pairs
        flags = dict(
            gemm=p.kind == Kind.GEMM,
            hash=p.kind == Kind.HASH, score=p.kind == Kind.SCORE, attend=attend_p,
            scoring=(p.kind == Kind.SCORE) | attend_p,
            part_max=p.part == Part.MAX, part_sum=p.part == Part.SUM,
            pv=attend_p & (p.part != Part.MAX),           # the job order has P·V tiles
            kv=attend_p & ~k_only_p,      # B is K's rows and V's (not K's alone: a
                                          # maximum's pass, unpaired)
            pairs=attend_p & p.pairs,                     # ... a token's K then its V
            carry=(p.part == Part.SUM) & ~p.first,        # adds to earlier chunks' sums
            absorb=(p.part == Part.SUM) & ~p.final,       # keeps its sums for later chunks
            restart=(p.part != Part.MAX) | p.first,       # restarts the rows' maxima
            causal=attend_p & (p.causal != 0))
        is_ = {k: Signal(name=f"cmd_{k}") for k in flags}
        # the score flag again, for the score packer alone (kept apart in synthesis: the
        # flag's wide fan-out had been routed 3.7 ns into the packer's valid: for the clock)
        score_pk = Signal(name="cmd_score_packer", attrs=KEEP_COPY)
        # and one more for the exp unit's ready (the packer's copy had been routed 4.1 ns
        # into the exp unit's queue and on into the packer: for the clock)
        score_exp = Signal(name="cmd_score_exp", attrs=KEEP_COPY)
        # the sizes less one (the last-index compares had each sat behind a subtraction's
        # carry chain); signed, so a zero size's -1 is no index
        kcv = (p.k + n - 1) >> sh.log_n
        ltv = (p.l + n - 1) >> sh.log_n
        less = dict(kc=kcv - 1, lt=ltv - 1, mt=((p.m + n - 1) >> sh.log_n) - 1,
                    kt=Mux(p.k < n, n, p.k) - 1,            # beats a tile: k padded to n
                    kt_pv=Mux(p.l < n, n, p.l) - 1,         # a P·V tile's: l padded to n
                    m=p.m - 1, l=p.l - 1, causal=p.causal - 1)
        m1 = {k: Signal(signed(18), name=f"cmd_{k}_m1") for k in less}
        # and four of them less two, for the feeder's last-beat and last-tile flags (``kk ==
        # kt - 2`` for ``kk + 1 == kt - 1``: the increment's carry chain had sat in front of
        # the compare, for the clock)
        less2 = {k: less[k] - 1 for k in ("kt", "kt_pv", "kc", "lt")}
        m2 = {k: Signal(signed(18), name=f"cmd_{k}_m2") for k in less2}
        # light attention's row limit less the row's position (the score writer)
        lim_base = Signal(signed(SPAN_BITS + 3), name="cmd_lim_base")
        # the checks: each compare on the stream's payload into a register every idle cycle,
        # each whole in its register with the kind flags it applies to, so that CHECK is an
        # OR of registers, the size checks in two registers (CHECK's OR one LUT rather than
        # a chain of four): for the clock
        chunked_p = p.part != Part.WHOLE
        raw = dict(
            k_zero=p.k == 0,
            # a zero size, a size over the buffers, a score reduction whose scores overflow
            sizes=(p.m == 0) | (p.k == 0) | (p.l == 0) | (p.k > sh.k_buf) |
                  (p.l > sh.b_rows) | flags["scoring"] & (p.k > self._k_max_score),
            # the attended set: a chunk of a chunked light attention is one row tile inside
            # the set; the causal tokens fit the set and the first row's position the step
            span=chunked_p & (~attend_p | (p.part > Part.SUM) | (p.m > n) | (p.span < p.l)) |
                 attend_p & ~chunked_p & (p.causal > p.l) |
                 attend_p & (p.causal != 0) & (p.pos0 >= p.causal),
            kind_over=p.kind > Kind.ATTEND,
            hash_width=flags["hash"] & (p.l != sh.n_hp))
        ck = {k: Signal(name=f"check_{k}") for k in raw}
        # the error flag and code load from copies of the checks of their own (the refusal,
        # whose loads spread over the chip, had been routed 4.2 and 3.9 ns into the error
        # code's enable: for the clock)
        ck_err = {k: Signal(name=f"check_{k}_err", attrs=KEEP_COPY)
                  for k in raw if k != "k_zero"}
        drop_a_lim = Signal(17, name="drop_a_lim")
        drop_b_lim = Signal(17, name="drop_b_lim")
        cur, kc, lt, mt = Signal(p.shape()), Signal(16), Signal(16), Signal(16)
        with m.If(idle):
            m.d.sync += [is_[k].eq(v) for k, v in flags.items()]
            m.d.sync += [score_pk.eq(flags["score"]), score_exp.eq(flags["score"])]
            m.d.sync += [m1[k].eq(v) for k, v in less.items()]
            m.d.sync += [m2[k].eq(v) for k, v in less2.items()]
            m.d.sync += lim_base.eq(Mux(p.part == Part.WHOLE, p.l, p.span) - p.causal + 1)
            m.d.sync += [ck[k].eq(v) for k, v in raw.items()]
            m.d.sync += [c.eq(raw[k]) for k, c in ck_err.items()]
            m.d.sync += [drop_a_lim.eq(p.m), drop_b_lim.eq(Mux(flags["kv"], p.l << 1, p.l))]
            m.d.sync += [cur.eq(p), kc.eq(kcv), lt.eq(ltv), mt.eq((p.m + n - 1) >> sh.log_n)]
        # the scoring flag's next value (the score take's copies: the score writer)
        m.d.comb += st.scoring_next.eq(Mux(idle, flags["scoring"], is_["scoring"]))
        m.d.comb += [st.cur.eq(cur), st.kc.eq(kc), st.lt.eq(lt), st.mt.eq(mt),
                     st.lim_base.eq(lim_base), self.score_pk.eq(score_pk),
                     self.score_exp.eq(score_exp),
                     *(getattr(st.is_, k).eq(v) for k, v in is_.items()),
                     *(getattr(st.m1, k).eq(v) for k, v in m1.items()),
                     *(getattr(st.m2, k).eq(v) for k, v in m2.items())]
        return ck, ck_err, drop_a_lim, drop_b_lim

    def _write_stage(self, m):
        """B's, V's and the biases' writes through a register stage (address, data and
        enables; the state's decoder, the stream's valid and the lane's compare had run into
        the enables of RAMs across the chip: for the clock). Returns the stage's address and
        enable registers, which the states load."""
        n = self._sh.n
        b_wr = self.b_wr
        w = dict(
            bw_addr=Signal(b_wr[0].addr.shape(), name="b_wr_addr", reset_less=True),
            bw_en=Signal(n, name="b_wr_en"),
            vw_addr=Signal(self.v_wr.addr.shape(), name="v_wr_addr", reset_less=True),
            vw_en=Signal(name="v_wr_en"),
            biw_addr=Signal(self.bias_wr.addr.shape(), name="bias_wr_addr", reset_less=True),
            biw_en=Signal(name="bias_wr_en"))
        bw_data = Signal(b_wr[0].data.shape(), name="b_wr_data", reset_less=True)
        biw_data = Signal(self.bias_wr.data.shape(), name="bias_wr_data", reset_less=True)
        m.d.sync += [w["bw_en"].eq(0), w["vw_en"].eq(0), w["biw_en"].eq(0),
                     bw_data.eq(self.i_b.payload.data),
                     biw_data.eq(self.i_bias.payload.data)]
        for r, wr in enumerate(b_wr):
            m.d.comb += [wr.addr.eq(w["bw_addr"]), wr.data.eq(bw_data),
                         wr.en.eq(w["bw_en"][r])]
        m.d.comb += [self.v_wr.addr.eq(w["vw_addr"]), self.v_wr.data.eq(bw_data),
                     self.v_wr.en.eq(w["vw_en"]), self.bias_wr.addr.eq(w["biw_addr"]),
                     self.bias_wr.data.eq(biw_data), self.bias_wr.en.eq(w["biw_en"])]
        return w

    def elaborate(self, platform):
        m = Module()
        st = self.st
        # the state is IDLE: a register of its own, set and cleared with the state's moves
        # (the state's decoder had driven the enables of the command's 400 registers beside
        # the load's handshakes and counters: for the clock)
        idle = Signal(init=1, name="cmd_idle")
        m.d.comb += self.i_cmd.ready.eq(idle)
        ck, ck_err, drop_a_lim, drop_b_lim = self._decode(m, idle)
        # the command is refused, and its error code (1 bad size, 2 bad kind, 3 hash width),
        # from either set of check registers; the error loads in the cycle after the take
        # (``checking``, a flag of CHECK of its own)
        refused = lambda c: c["sizes"] | c["span"] | c["kind_over"] | c["hash_width"]
        bad_code = lambda c: Mux(c["sizes"] | c["span"], 1, Mux(c["kind_over"], 2, 3))
        checking = Signal(name="cmd_checking", attrs=KEEP_COPY)
        m.d.sync += checking.eq(idle & self.i_cmd.valid)
        with m.If(checking & refused(ck_err)):
            m.d.sync += [self.err.eq(1), self.err_code.eq(bad_code(ck_err))]
        # the A loader and the feeder may begin: the state is RUN (a register set and
        # cleared with the state's moves, not a decoder of the state: it enables and resets
        # much of the engine)
        start = Signal()
        m.d.comb += [st.start.eq(start), st.start_next.eq(start)]
        m.d.sync += start.eq(st.start_next)
        w = self._write_stage(m)
        self._fsm(m, idle, refused(ck), ck["k_zero"], drop_a_lim, drop_b_lim, w)
        return m

    def _fsm(self, m, idle, bad, k_zero, drop_a_lim, drop_b_lim, w):
        """The command's states. The load's position (row, chunk): the states say whether
        each steps or goes back to 0 (``inc``, ``zero``: 0 wins), and whether each is at its
        last value is kept in a register (the compares had sat behind the state's moves, and
        before that between the operand streams' handshakes and the state's enable: for the
        clock). A refused command's beats are counted as rows of chunks (no multiplier) up
        to a limit loaded with the command, whether rows are left a register too (for the
        clock)."""
        sh, st, n = self._sh, self.st, self._sh.n
        rc = stepped_counter(m, "load_row", 16, {"l": st.m1.l, "lt": st.m1.lt})
        cc = stepped_counter(m, "load_chunk", 16, {"kc": st.m1.kc})
        row, chunk, chunk_last = rc.pos, cc.pos, cc.at["kc"]
        drop_a_row, drop_a_chunk = Signal(17), Signal(16)
        drop_b_row, drop_b_chunk = Signal(17), Signal(16)
        drop_bias = Signal(16)
        a_left = Signal(name="drop_a_left")
        b_left = Signal(name="drop_b_left")

        def row_chunk_step(row_, chunk_, left, lim):
            with m.If(chunk_ == st.m1.kc):
                m.d.sync += [chunk_.eq(0), row_.eq(row_ + 1), left.eq(row_ + 1 != lim)]
            with m.Else():
                m.d.sync += chunk_.eq(chunk_ + 1)

        def load_step():
            with m.If(chunk_last):
                m.d.comb += [cc.zero.eq(1), rc.inc.eq(1)]
            with m.Else():
                m.d.comb += cc.inc.eq(1)

        i_b, i_bias = self.i_b, self.i_bias
        with m.FSM(name="cmd_fsm"):
            with m.State("IDLE"):
                m.d.comb += [rc.zero.eq(1), cc.zero.eq(1)]
                with m.If(self.i_cmd.valid):
                    m.d.sync += idle.eq(0)
                    m.next = "CHECK"
            with m.State("CHECK"):
                # the drop counters load in CHECK whether the command is refused or not (only
                # DROP reads them; ``bad`` had been in front of their enables)
                m.d.sync += [drop_a_row.eq(Mux(k_zero, drop_a_lim, 0)), drop_a_chunk.eq(0),
                             drop_b_row.eq(Mux(k_zero, drop_b_lim, 0)), drop_b_chunk.eq(0),
                             a_left.eq(~k_zero & (drop_a_lim != 0)),
                             b_left.eq(~k_zero & (drop_b_lim != 0)),
                             drop_bias.eq(Mux(st.is_.hash | st.is_.score, st.lt, 0))]
                with m.If(bad):
                    m.d.comb += self.refuse.eq(1)
                    m.next = "DROP"
                with m.Elif(st.is_.hash | st.is_.score):
                    m.next = "BIAS"
                with m.Else():
                    m.next = "LOAD_B"
            with m.State("DROP"):
                m.d.comb += [self.a_drop.eq(a_left), i_b.ready.eq(b_left),
                             i_bias.ready.eq(drop_bias != 0)]
                with m.If(self.a_valid & a_left):
                    row_chunk_step(drop_a_row, drop_a_chunk, a_left, drop_a_lim)
                with m.If(i_b.valid & b_left):
                    row_chunk_step(drop_b_row, drop_b_chunk, b_left, drop_b_lim)
                with m.If(i_bias.valid & (drop_bias != 0)):
                    m.d.sync += drop_bias.eq(drop_bias - 1)
                with m.If(~a_left & ~b_left & (drop_bias == 0)):
                    m.d.sync += idle.eq(1)
                    m.next = "IDLE"
            with m.State("BIAS"):
                m.d.comb += i_bias.ready.eq(1)
                m.d.sync += [w["biw_addr"].eq(row), w["biw_en"].eq(i_bias.valid)]
                with m.If(i_bias.valid):
                    m.d.comb += rc.inc.eq(1)
                    with m.If(rc.at["lt"]):
                        m.d.comb += rc.zero.eq(1)
                        m.next = "LOAD_B"
            with m.State("LOAD_B"):
                m.d.comb += i_b.ready.eq(1)
                lane = row[:sh.log_n] if n > 1 else Const(0, 1)
                m.d.sync += [w["bw_addr"].eq(mem_addr(row >> sh.log_n, chunk, sh.kc_max)),
                             w["bw_en"].eq(Cat(i_b.valid & (lane == r) for r in range(n)))]
                pairs = st.is_.pairs
                with m.If(i_b.valid):
                    with m.If(pairs & chunk_last):
                        m.d.comb += cc.zero.eq(1)     # this token's V row follows
                        m.next = "LOAD_V"
                    with m.Else():
                        load_step()
                    with m.If(~pairs & chunk_last & rc.at["l"]):
                        m.d.comb += rc.zero.eq(1)
                        m.d.comb += st.start_next.eq(~st.is_.kv)
                        m.next = "RUN"
                        with m.If(st.is_.kv):
                            m.next = "LOAD_V"
            with m.State("LOAD_V"):
                m.d.comb += i_b.ready.eq(1)
                m.d.sync += [w["vw_addr"].eq(mem_addr(row, chunk, sh.vc_max)),
                             w["vw_en"].eq(i_b.valid)]
                with m.If(i_b.valid):
                    load_step()
                    with m.If(chunk_last & rc.at["l"]):
                        m.d.comb += st.start_next.eq(1)
                        m.next = "RUN"
                    with m.Elif(st.cur.pairs & chunk_last):
                        m.next = "LOAD_B"
            with m.State("RUN"):
                with m.If(self.feed_done & self.out_done & self.score_done):
                    m.d.comb += st.start_next.eq(0)
                    m.d.sync += idle.eq(1)
                    m.next = "IDLE"
