"""The V-Rex core: the blocks joined behind AXI4-Lite registers (being built; its register
map and descriptor format are in regmap.py)."""
