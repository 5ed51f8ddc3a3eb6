"""The core's register file, as a host sees it: a reference model of ``vrex.regmap`` (access
types, reset values, the first-error rule, the interrupt causes) and the descriptor checks of
``golden.core.check_descriptor``, driven by the same actions as the RTL in both tiers.

An action is one of
    ``("write", offset, data, strb)``: an AXI4-Lite write (the response is checked);
    ``("read", offset)``: an AXI4-Lite read (data and response checked);
    ``("desc", fields)``: the ``DESC_WORDS`` (21) words of a descriptor written to DESC_DATA;
    ``("pop", n)``: the sequencer takes n descriptors from ``o_desc`` (checked word for word);
    ``("done", version)``: the sequencer reports a descriptor completed;
    ``("error", code, addr, version)``: the sequencer reports an error.
"""
from __future__ import annotations

import numpy as np

from golden.core import buffer_bytes, check_descriptor
from rtl.core import map as core_map
from vrex import regmap

__all__ = ["RegsModel", "random_descriptor", "bad_descriptors"]

OKAY, SLVERR = 0, 2


class RegsModel:
    def __init__(self, cfg, perf_values: list):
        self.cfg = cfg
        self.names = [r.name[5:].lower() for r in core_map.perf_registers()]
        self.regs = {r.offset: r for r in regmap.REGISTERS}
        for k, n in enumerate(self.names):
            self.regs[regmap.PERF_BASE + 4 * k] = regmap.Register(f"PERF_{n.upper()}",
                                                                  regmap.PERF_BASE + 4 * k,
                                                                  "RO", n)
        self.rw = {r.name: r.reset for r in regmap.REGISTERS if r.access == "RW"}
        self.build = regmap.build_values(cfg)
        self.perf = perf_values
        self.code = self.err_version = self.err_addr = 0
        self.irq_status = 0
        self.stage, self.queue, self.last, self.last_step = [], [], {}, {}
        self.spoiled = False                # a word of the staged descriptor was dropped
        self.done_count = self.done_version = 0
        self.depth = cfg.core_queue_depth
        self.busy = 0

    # --- the sequencer's side ------------------------------------------------------------
    def _raise(self, code, version=0, addr=0):
        if self.code == 0:
            self.code, self.err_version, self.err_addr = code, version, addr
        self.irq_status |= 2

    def pop(self, n):
        was_full = len(self.queue) == self.depth
        out, self.queue = self.queue[:n], self.queue[n:]
        if was_full and n:
            self.irq_status |= 4
        return out

    def done(self, version):
        self.done_count += 1
        self.done_version = version
        self.irq_status |= 1

    # --- the host's side -----------------------------------------------------------------
    def write(self, off, data, strb=0xF):
        r = self.regs.get(off & 0xFFC)      # address bits 1:0 ignored (regmap.BUS_RULES)
        if r is None or r.access == "RO":
            return SLVERR
        mask = sum(0xFF << (8 * i) for i in range(4) if strb >> i & 1)
        if r.name == "CTRL":
            self.rw["CTRL"] = (self.rw["CTRL"] & ~mask) | (data & mask & 0b101)
            if data & mask & 2:                          # soft reset: a new stream
                self.queue, self.stage, self.code = [], [], 0
                self.last, self.last_step, self.spoiled = {}, {}, False
        elif r.name == "ERROR_CODE":
            if data & mask & 1:
                self.code = 0
        elif r.name == "IRQ_STATUS":
            self.irq_status &= ~(data & mask & 7)
        elif r.name == "DESC_DATA":
            # every word counts; one dropped (a partial write, the queue full) drops its
            # descriptor
            partial = strb & 0xF != 0xF
            if partial:
                self._raise(regmap.ERRORS["DESC_PARTIAL_WRITE"][0])
            elif len(self.queue) == self.depth:
                self._raise(regmap.ERRORS["QUEUE_OVERFLOW"][0])
            self.spoiled |= partial or len(self.queue) == self.depth
            self.stage.append(data)
            if len(self.stage) == regmap.DESC_WORDS:
                if not self.spoiled:
                    self._queue(self.stage)
                self.stage, self.spoiled = [], False
            return SLVERR if partial else OKAY
        elif r.access == "RW":
            self.rw[r.name] = (self.rw[r.name] & ~mask) | (data & mask)
        return OKAY

    def _queue(self, words):
        desc = regmap.decode_descriptor(words)
        rw = self.rw
        name, code = check_descriptor(
            desc, self.cfg, io_base=rw["IO_BASE_LO"] | rw["IO_BASE_HI"] << 32,
            io_size=rw["IO_SIZE"], bus_bytes=self.cfg.kvmu_bus_bytes, last_version=self.last,
            last_step=self.last_step)
        if code:
            self._raise(code, desc["version"])
        else:
            self.last[desc["layer"]] = desc["version"]
            self.last_step[desc["layer"]] = desc["step"]
            self.queue.append(list(words))

    def read(self, off):
        r = self.regs.get(off & 0xFFC)
        if r is None:
            return 0, SLVERR
        n = r.name
        if n in ("ID", "VERSION"):
            v = r.reset
        elif n in ("BUILD0", "BUILD1", "BUILD2"):
            v = self.build[n]
        elif n == "STATUS":
            q = len(self.queue)
            v = (self.busy | (q == 0) << 1 | (q == self.depth) << 2 | (self.code != 0) << 3
                 | q << 8)
        elif n == "ERROR_CODE":
            v = self.code | self.err_version << 16
        elif n == "ERROR_ADDR_LO":
            v = self.err_addr & 0xFFFFFFFF
        elif n == "ERROR_ADDR_HI":
            v = self.err_addr >> 32
        elif n == "IRQ_STATUS":
            v = self.irq_status
        elif n == "DESC_DONE":
            v = self.done_count
        elif n == "DESC_VERSION":
            v = self.done_version
        elif n.startswith("PERF_"):
            v = self.perf[self.names.index(n[5:].lower())]
        elif n == "CTRL":
            v = self.rw[n] & ~2
        elif r.access == "RW":
            v = self.rw[n]
        else:
            v = 0
        return v, OKAY

    @property
    def irq(self) -> int:
        return int(bool(self.irq_status & self.rw["IRQ_ENABLE"] & 7))

    def apply(self, action):
        """Apply one action; returns what the RTL must answer: a write's response, a read's
        ``(data, response)``, the popped descriptors' words, or None."""
        kind = action[0]
        if kind == "write":
            return self.write(action[1], action[2], action[3])
        if kind == "read":
            return self.read(action[1])
        if kind == "desc":
            return [self.write(regmap.offsets({})["DESC_DATA"], w)
                    for w in regmap.encode_descriptor(**action[1])]
        if kind == "pop":
            return self.pop(action[1])
        if kind == "done":
            return self.done(action[1])
        if kind == "error":
            self._raise(action[1], action[3], action[2])
            return None
        raise ValueError(f"unknown action {kind!r}")


def random_descriptor(rng, cfg, io_base: int, io_size: int, layer=None, version=0,
                      step=0) -> dict:
    """A descriptor the core accepts (given its layer's last version and step are not
    newer than ``version`` and ``step``): aligned buffers inside the I/O window."""
    bus = cfg.kvmu_bus_bytes
    t = int(rng.integers(1, 64))
    desc = {"version": version, "layer": int(rng.integers(0, cfg.n_layers)) if layer is None
            else layer, "kind": int(rng.integers(0, 2)), "dense": int(rng.integers(0, 2)),
            "step_len": t,
            "step": step, "beta_m": int(rng.integers(0, 1 << 16)),
            "beta_shift": int(rng.integers(0, 64)),
            "n_sink": int(rng.choice([0, int(rng.integers(1, 64))])),
            "token0": int(rng.integers(0, 1 << 20))}
    for name in ("q_addr", "k_addr", "k_hash_addr", "v_addr", "hp_addr", "o_addr",
                 "sink_k_addr", "sink_v_addr"):
        # without sinks their addresses are not checked: anything, even misaligned
        desc[name] = int(rng.integers(0, 1 << 40))
    sizes = buffer_bytes(desc, cfg)
    for name, (_, n) in sizes.items():
        hi = (io_size - n) // bus
        desc[name] = io_base + bus * int(rng.integers(0, max(1, hi)))
    return desc


def bad_descriptors(rng, cfg, io_base, io_size, version, step):
    """One descriptor of each refusal, in check order: (name, descriptor)."""
    good = lambda: random_descriptor(rng, cfg, io_base, io_size, layer=0, version=version,
                                     step=step)
    out = []
    d = good(); d["step_len"] = 0; out.append(("DESC_ZERO_LENGTH", d))
    d = good(); d["layer"] = cfg.n_layers; out.append(("DESC_UNKNOWN_LAYER", d))
    d = good(); d["k_addr"] += 1; out.append(("DESC_MISALIGNED", d))
    d = good(); d["o_addr"] = io_base + io_size; out.append(("DESC_OUT_OF_WINDOW", d))
    d = good(); d["v_addr"] = io_base - cfg.kvmu_bus_bytes; out.append(("DESC_OUT_OF_WINDOW", d))
    d = good(); d["n_sink"] = 3; d["sink_v_addr"] = io_base + io_size - 16
    out.append(("DESC_OUT_OF_WINDOW", d))
    d = good(); d["n_sink"] = 2; d["sink_k_addr"] = io_base + 4; out.append(("DESC_MISALIGNED", d))
    d = good(); d["version"] = version - 1; out.append(("DESC_VERSION_BACKWARDS", d))
    d = good(); d["version"] = version - 1; d["step"] = step - 1
    out.append(("DESC_VERSION_BACKWARDS", d))
    d = good(); d["step"] = step - 1; out.append(("DESC_BAD_STEP", d))
    if cfg.step_bits < 16:
        d = good(); d["step"] = 1 << cfg.step_bits; out.append(("DESC_BAD_STEP", d))
    return out


def scenario(cfg, seed: int = 0):
    """A host's run of the register file: reset values; every RW register written with
    random strobes and read back; unmapped and read-only writes; the window set; good and
    bad descriptors, errors cleared; the queue filled past its depth; pops; done and error
    reports; interrupts enabled, raised and cleared; a soft reset; then the bus rules
    (:func:`_bus_rules`). Returns the actions."""
    rng = np.random.default_rng(seed)
    off = regmap.offsets({})
    acts = [("read", r.offset) for r in regmap.REGISTERS]
    n_perf = len(RegsModel(cfg, []).names)
    acts += [("read", regmap.PERF_BASE + 4 * k) for k in range(n_perf)]
    for r in regmap.REGISTERS:
        if r.access == "RW" and r.name != "CTRL":
            acts.append(("write", r.offset, int(rng.integers(0, 1 << 32)),
                         int(rng.integers(1, 16))))
            acts.append(("read", r.offset))
    acts += [("write", off["ID"], 5, 0xF), ("write", 0xFFC, 1, 0xF), ("read", 0xFFC),
             ("read", off["ID"])]
    io_base, io_size = 0x1000_0000, 1 << 22
    acts += [("write", off["IO_BASE_LO"], io_base, 0xF), ("write", off["IO_BASE_HI"], 0, 0xF),
             ("write", off["IO_SIZE"], io_size, 0xF), ("write", off["IRQ_ENABLE"], 7, 0xF)]
    version = 10
    for k in range(3):                  # the same step twice, then the next
        acts.append(("desc", random_descriptor(rng, cfg, io_base, io_size, layer=0,
                                               version=version + k, step=2 + k // 2)))
    acts += [("pop", 2), ("read", off["STATUS"])]
    for layer in range(1, cfg.n_layers):    # every layer's own first step, taken at once
        acts += [("desc", random_descriptor(rng, cfg, io_base, io_size, layer=layer,
                                            version=version + 2 + layer, step=2)), ("pop", 1)]
    last = version + 1 + cfg.n_layers               # the last version accepted
    for name, d in bad_descriptors(rng, cfg, io_base, io_size, last, 3):
        acts += [("desc", d), ("read", off["ERROR_CODE"]), ("read", off["IRQ_STATUS"]),
                 ("write", off["ERROR_CODE"], 1, 0xF), ("write", off["IRQ_STATUS"], 2, 0xF)]
    for k in range(cfg.core_queue_depth + 1):      # one more than fits: overflow
        acts.append(("desc", random_descriptor(rng, cfg, io_base, io_size, layer=1,
                                               version=20 + k)))
    acts += [("read", off["STATUS"]), ("read", off["ERROR_CODE"]), ("pop", 2),
             ("read", off["IRQ_STATUS"]), ("done", 21), ("done", 22),
             ("read", off["DESC_DONE"]), ("read", off["DESC_VERSION"]),
             ("write", off["ERROR_CODE"], 1, 0xF),
             ("error", regmap.ERRORS["BUS_READ"][0], 0x1234_5678_9ABC, 22),
             ("read", off["ERROR_CODE"]), ("read", off["ERROR_ADDR_LO"]),
             ("read", off["ERROR_ADDR_HI"]), ("write", off["IRQ_STATUS"], 7, 0xF),
             ("read", off["IRQ_STATUS"]),
             ("write", off["CTRL"], 5, 0xF), ("read", off["CTRL"]),
             ("write", off["CTRL"], 3, 0xF), ("read", off["CTRL"]), ("read", off["STATUS"]),
             ("read", off["ERROR_CODE"])]
    return acts + _bus_rules(rng, cfg, io_base, io_size)


def _bus_rules(rng, cfg, io_base, io_size):
    """After a soft reset: reads at unaligned addresses; a descriptor with a partial write
    in its middle (dropped whole, SLVERR, the next one whole); the queue filled, a
    descriptor begun while it is full and finished after a pop (dropped whole), the next one
    whole; a step older than the layer's last; versions past the wrap (the last version,
    then 0: refused; after a soft reset, 0 accepted)."""
    off = regmap.offsets({})
    desc = lambda v, s=5: random_descriptor(rng, cfg, io_base, io_size, layer=0, version=v,
                                            step=s)
    words = lambda d: regmap.encode_descriptor(**d)
    acts = [("read", off["ID"] + 1), ("read", off["IO_SIZE"] + 2), ("read", off["ID"] + 3),
            ("read", 0xFFD), ("write", off["TH_R"] + 2, 0x0001_0000, 0xC),
            ("read", off["TH_R"])]
    d = words(desc(1))
    acts += [("write", off["DESC_DATA"], w, 0xF) for w in d[:3]]
    acts += [("write", off["DESC_DATA"], d[3], 0x3)]
    acts += [("write", off["DESC_DATA"], w, 0xF) for w in d[4:]]
    acts += [("read", off["ERROR_CODE"]), ("read", off["STATUS"]),
             ("write", off["ERROR_CODE"], 1, 0xF), ("desc", desc(2)), ("pop", 1)]
    acts += [("desc", desc(3 + k)) for k in range(cfg.core_queue_depth)]
    d = words(desc(20))
    acts += [("write", off["DESC_DATA"], w, 0xF) for w in d[:5]]
    acts += [("read", off["ERROR_CODE"]), ("pop", 1)]
    acts += [("write", off["DESC_DATA"], w, 0xF) for w in d[5:]]
    acts += [("read", off["STATUS"]), ("write", off["ERROR_CODE"], 1, 0xF),
             ("pop", cfg.core_queue_depth), ("desc", desc(21, 6)), ("pop", 1),
             ("desc", desc(22, 5)), ("read", off["ERROR_CODE"]), ("read", off["STATUS"]),
             ("write", off["ERROR_CODE"], 1, 0xF), ("desc", desc(0xFFFF, 7)),
             ("desc", desc(0, 8)), ("read", off["ERROR_CODE"]), ("pop", 1),
             ("write", off["CTRL"], 3, 0xF), ("desc", desc(0, 0)), ("pop", 1),
             ("read", off["ERROR_CODE"])]
    return acts
