"""The host side of the core: the driver (:mod:`vrex.host.driver`), the stream as a host
lays it out (:mod:`vrex.host.plan`), and the serial link to a board's bridge
(:mod:`vrex.host.serial`)."""
