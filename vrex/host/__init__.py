"""The host side of the core, neutral (it imports the register map only): the driver
(:mod:`vrex.host.driver`) and the serial link to a board's bridge (:mod:`vrex.host.serial`).
The stream as a host lays it out is :mod:`golden.layout`; a board's host program
``python -m golden.board``."""
