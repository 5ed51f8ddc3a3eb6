"""The core's sequencer: :class:`~.top.Sequencer` and the phase controllers it runs."""
