"""The WiCSum threshold unit: :class:`WicsumThresholdUnit` and the parts it joins."""
from .unit import WicsumThresholdUnit

__all__ = ["WicsumThresholdUnit"]
