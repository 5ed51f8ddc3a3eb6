"""The attention engine: :class:`AttentionEngine` and the parts it joins."""
from .common import SPAN_BITS, Kind, Part
from .unit import AttentionEngine

__all__ = ["AttentionEngine", "Kind", "Part", "SPAN_BITS"]
