"""NumPy golden model of ReSV (V-Rex, HPCA 2026): float reference and hardware-exact integers."""
