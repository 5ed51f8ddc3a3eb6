"""Design-space sweeps: Config fields over traces, each point's fidelity (golden model),
performance (cycle model) and area (Yosys), on Dask, with the Pareto front of the three.

:mod:`.spec` reads a sweep file, :mod:`.point` measures a point, :mod:`.run` runs the tasks
(an embedded local Dask cluster, an existing one, or this process) into a table on disk, and
:mod:`.report` plots and names the front. ``python -m sweep FILE`` (``vrex-sweep``,
``make sweep SWEEP=FILE``); docs/sweep.md.
"""
from .spec import Sweep, SweepError, load_sweep
from .run import run_sweep
from .report import pareto_front, write_report

__all__ = ["Sweep", "SweepError", "load_sweep", "run_sweep", "pareto_front", "write_report"]
