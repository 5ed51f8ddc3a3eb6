"""make coverage: line, toggle and functional coverage of every block (docs/coverage.md)."""
