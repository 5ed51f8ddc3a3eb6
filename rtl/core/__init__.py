"""The V-Rex core: the host interface (regs.py); the sequencer is still to come."""
