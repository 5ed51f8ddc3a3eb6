"""Formal proofs with SymbiYosys: the protocol rules (rules), a block under them (harness),
what is proven at which depth (plan), the runner (sby) and `make formal` (__main__)."""
