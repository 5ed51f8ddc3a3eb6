"""The WTU's timing, cycle for cycle, from the golden model's per-row results: the RTL's stage
rules (``rtl.dre.wtu``) stepped a cycle at a time, the state at the start of a cycle deciding
what each stage does in it. The tests and the bench check the RTL's first beats, closing beats
and busy cycles against it."""
from __future__ import annotations

__all__ = ["schedule"]


def schedule(unit, rows, head_selected, *, clearing: int = 0) -> dict:
    """The timing of ``unit`` (a :class:`rtl.dre.wtu.WicsumThresholdUnit`) with the input
    always valid and ``o`` always ready.

    ``rows``: ``(n, visited, refused, any_valid, head_last)`` per row in order
    (:func:`verif.wtu.model.schedule_rows`); ``head_selected``: the selected ids per head.
    Returns ``first_beats`` (the cycle each row's first beat is taken, from the first row's at
    0; ``clearing``: the cycles the marker still spends clearing the union after that),
    ``closes`` (the cycle of each head's closing beat), ``busy`` (what the ``busy`` counter
    counts), ``done`` (the cycle after the last closing beat) and ``trace`` (busy a cycle)."""
    return _Schedule(unit, rows, head_selected, clearing).run()


class _Schedule:
    """The stages' state; :meth:`cycle` steps them once (receive, walk, release, mark)."""

    def __init__(self, u, rows, head_selected, clearing):
        self.u, self.clearing = u, clearing
        N, D = u.lanes, u.row_entries // u.lanes
        self.D, self.NB, self.C = D, u.CODE_BANKS, u.WALK_CONTEXTS
        self.rows = [dict(nb=max(1, -(-n // N)), skip=bool(refused) or not any_valid,
                          passes=u.passes(v), head_last=hl)
                     for n, v, refused, any_valid, hl in rows]
        self.emits = iter(self._emit_lengths(head_selected))
        self.first_beats, self.closes, self.takes, self.busy, self.trace = [], [], {}, 0, []
        self.r_row = self.r_beat = self.inflight = self.occupied = 0     # receive
        self.fifo = []                          # (ready cycle, row) for the walk
        # walk contexts: {row, state PEND/ISSUE/DRAIN, read, done, last, bank}
        self.ctx = [None] * self.C
        self.cur, self.issuing, self.took = 0, False, False
        self.rel, self.rp = [False] * self.NB, 0    # banks whose rows' words wait for release
        self.push = None        # (bank, row) to the marker: in its slot the next cycle
        self.next_bank, self.used, self.slot = 0, [False] * self.NB, [None] * self.NB
        self.m_state, self.m_end, self.m_bank = "IDLE", 0, 0    # marker: IDLE, MARK, EMIT
        self.t = 0

    def _emit_lengths(self, head_selected):
        """Each head's emit cycles: its rows' longest stored word count and selected ids."""
        out, words, sel = [], 0, iter(head_selected)
        for r in self.rows:
            r["stored"] = min(r["nb"], self.D)
            if r["nb"] <= self.D:
                words = max(words, r["stored"])
            if r["head_last"]:
                out.append(self.u.emit_cycles(words, len(next(sel))))
                words = 0
        return out

    def run(self) -> dict:
        while True:
            self.cycle()
            if (self.r_row == len(self.rows) and not self.fifo and self.ctx == [None] * self.C
                    and self.push is None and self.m_state == "IDLE"
                    and all(s is None for s in self.slot)):
                return {"first_beats": self.first_beats, "closes": self.closes,
                        "busy": self.busy, "done": self.t, "trace": self.trace}

    def cycle(self):
        now = [None if c is None else dict(c) for c in self.ctx]
        slot_now, used_now, rel_now = list(self.slot), list(self.used), list(self.rel)
        d_inflight, d_occupied = self._receive()
        b = self._busy(now, slot_now)
        if self.push is not None:                   # the push register into its slot
            pb, k = self.push
            self.slot[pb], self.rel[pb], self.push = k, True, None
        deciding = self._decide(now)
        self._read_port(now)
        d_release = self._release(rel_now, slot_now)
        d_inflight -= self._take_row(now, used_now, deciding)
        b |= self._mark(slot_now)
        self.inflight += d_inflight
        self.occupied += d_occupied - d_release
        self.busy += b
        self.trace.append(int(b))
        self.t += 1

    def _receive(self):
        """A beat a cycle while the ring has room and fewer than ROWS_AHEAD rows wait."""
        t, D = self.t, self.D
        if not (self.r_row < len(self.rows)
                and (self.r_beat > 0 or self.inflight < self.u.ROWS_AHEAD)
                and (self.occupied < D or self.r_beat >= D)):
            return 0, 0
        r = self.rows[self.r_row]
        d_inflight = 0
        if self.r_beat == 0:
            self.first_beats.append(t)
            d_inflight = 1
        d_occupied = int(self.r_beat < D)
        self.takes[t] = self.r_beat == r["nb"] - 1
        if self.takes[t]:
            self.fifo.append((t + self.u.receive_latency, self.r_row))
            self.r_row, self.r_beat = self.r_row + 1, 0
        else:
            self.r_beat += 1
        return d_inflight, d_occupied

    def _busy(self, now, slot_now) -> bool:
        """A beat in the receive pipeline (take to r), a row's last one in s1 to s4, a row
        queued, walked or in a slot."""
        t, takes = self.t, self.takes
        pipe = 4 + self.u.tree_stages               # take, p1, p2, the trees' stages, r
        return (any(t - k in takes for k in range(pipe))
                or any(takes.get(t - k, False) for k in range(pipe, self.u.receive_latency))
                or any(f[0] <= self.t for f in self.fifo) or any(c is not None for c in now)
                or any(s is not None for s in slot_now))

    def _decide(self, now):
        """A drained pass decides (never two in a cycle); a row's last pass frees its context
        and pushes the row to the marker."""
        deciding = next((c for c in range(self.C) if now[c] is not None
                         and now[c]["state"] == "DRAIN"
                         and self.t >= now[c]["last"] + self.u.walk_overhead), None)
        if deciding is not None:
            x = self.ctx[deciding]
            x["done"] += 1
            if x["done"] == self.rows[x["row"]]["passes"]:
                self.push = (x["bank"], x["row"])
                self.ctx[deciding] = None
            else:
                x["state"] = "PEND"
        return deciding

    def _read_port(self, now):
        """The walk's read port: the issuing pass reads on, or the oldest pending row starts."""
        if self.issuing:
            x = self.ctx[self.cur]
            x["read"] += 1
            if x["read"] == self.rows[x["row"]]["stored"]:
                x["state"], x["last"], self.issuing = "DRAIN", self.t, False
            return
        pend = [c for c in range(self.C) if now[c] is not None and now[c]["state"] == "PEND"]
        if pend:
            p = min(pend, key=lambda c: now[c]["row"])
            x = self.ctx[p]
            x["read"] = 1
            if self.rows[x["row"]]["stored"] == 1:
                x["state"], x["last"] = "DRAIN", self.t
            else:
                x["state"], self.issuing, self.cur = "ISSUE", True, p

    def _release(self, rel_now, slot_now) -> int:
        """The ring's words back in the banks' (the rows') order, one bank a cycle."""
        if not rel_now[self.rp]:
            return 0
        stored = self.rows[slot_now[self.rp]]["stored"]     # (the slot's row: still there)
        self.rel[self.rp], self.rp = False, (self.rp + 1) % self.NB
        return stored

    def _take_row(self, now, used_now, deciding) -> int:
        """A new row from the queue into a free context and the next bank (a row to skip
        straight to the marker); 1 when a row was taken."""
        took_now, self.took = self.took, False
        if not (self.fifo and self.fifo[0][0] <= self.t and not used_now[self.next_bank]
                and not took_now):
            return 0
        k = self.fifo[0][1]
        free = [c for c in range(self.C) if now[c] is None]
        if self.rows[k]["skip"] and deciding is None:
            self.push = (self.next_bank, k)
        elif not self.rows[k]["skip"] and free:
            self.ctx[free[0]] = dict(row=k, state="PEND", read=0, done=0, last=0,
                                     bank=self.next_bank)
        else:
            return 0
        self.fifo.pop(0)
        self.took = True
        self.used[self.next_bank] = True
        self.next_bank = (self.next_bank + 1) % self.NB
        return 1

    def _mark(self, slot_now) -> bool:
        """The marker: a slot's row marked (a cycle for a skipped row, a cycle a stored word
        otherwise), a head's last row followed by its emit; True while it works."""
        t, b, end = self.t, False, False
        if self.m_state == "IDLE" and slot_now[self.m_bank] is not None and t >= self.clearing:
            k = slot_now[self.m_bank]
            self.m_state = "MARK"
            self.m_end = t + (1 if self.rows[k]["skip"] else self.rows[k]["stored"])
        elif self.m_state == "MARK":
            b, end = True, t == self.m_end
        elif self.m_state == "EMIT":
            b = True
            if t == self.m_end:
                self.m_state = "IDLE"
                self.closes.append(t)
        if end:
            k = slot_now[self.m_bank]
            self.slot[self.m_bank], self.used[self.m_bank] = None, False
            self.m_bank = (self.m_bank + 1) % self.NB
            if self.rows[k]["head_last"]:
                self.m_state, self.m_end = "EMIT", t + next(self.emits)
            else:
                self.m_state = "IDLE"
        return b
