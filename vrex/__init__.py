"""The project's neutral base: the one build configuration, the parameter rules every block and
the configuration share, and the tool flow (toolchain environment, Verilog emission, lint).

``golden/``, ``rtl/``, ``verif/`` and ``synth/`` all import from here; nothing here imports
them, except :mod:`vrex.emit`, which elaborates the blocks of :data:`rtl.BLOCKS`.
"""
