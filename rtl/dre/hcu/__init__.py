"""The hash-cluster unit: :class:`HashClusterUnit` and the parts it joins."""
from .lanes import popcount
from .unit import HashClusterUnit

__all__ = ["HashClusterUnit", "popcount"]
