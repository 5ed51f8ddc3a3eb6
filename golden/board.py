"""``python -m golden.board --port /dev/ttyUSB0``: run the board's crop of the bundled trace on a
board over its serial port and compare every output row with the golden model (the same
driver and link as the board top's simulation, ``verif/board/tb.py``)."""
from __future__ import annotations

import argparse
import asyncio
import sys
import time

from vrex.boards import BOARDS

__all__ = ["main"]


async def _run(args) -> int:
    from vrex.boards import board_config
    from vrex.host.driver import Host
    from vrex.host.serial import PySerialPort, SerialLink
    from .layout import board_trace, compact_layout, compare_outputs, plan_stream
    from .trace import load_trace, quantise
    board = BOARDS[args.board]
    port = PySerialPort(args.port, args.baud or board.baud, timeout=args.timeout)
    link = SerialLink(port, retries=2)
    host = Host(link, poll=0, on_progress=lambda d, n: print(f"  {d} of {n} done", end="\r"))
    ident = await host.identify()
    print(f"V-Rex core, register map {ident['version'] >> 24}.{ident['version'] >> 16 & 0xFF}"
          f".{ident['version'] & 0xFFFF}")
    crop = board_trace(load_trace(args.trace), board)
    qt, failed = quantise(crop), 0
    for k, preset in enumerate(args.presets.split(",")):
        cfg = board_config(board, preset)
        plan = plan_stream(crop, qt, cfg, layout=compact_layout(cfg, far_slots=board.far_slots),
                           per_descriptor=True, fill_o=False)
        if k:
            await host.soft_reset()
        t0 = time.time()
        res = await host.run(plan, max_polls=100_000)
        bad = compare_outputs(plan, res.o_rows)
        ok = not bad and res.error == 0
        failed += not ok
        print(f"{preset}: {len(plan.descriptors)} descriptors, {'PASS' if ok else 'FAIL'} "
              f"(ERROR_CODE {res.error_code:#x}, {time.time() - t0:.1f} s)")
        for line in bad[:10]:
            print("  " + line)
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m golden.board", description=__doc__)
    ap.add_argument("--port", required=True, help="the board's serial port")
    ap.add_argument("--board", default="ulx3s", choices=sorted(BOARDS))
    ap.add_argument("--baud", type=int, help="the line's rate (default: the board's)")
    ap.add_argument("--trace", default="data/carphone_cut.npz")
    ap.add_argument("--presets", default="paper,tuned")
    ap.add_argument("--timeout", type=float, default=2.0, help="seconds for an answer")
    return asyncio.run(_run(ap.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
