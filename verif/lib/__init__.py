"""The testbench library both tiers share: idle and back-pressure patterns (pauses), stream
drivers for the Amaranth simulator and for cocotb, the testbench base, the Verilator runner,
the trace helper, the counters reader and the scoreboard."""
