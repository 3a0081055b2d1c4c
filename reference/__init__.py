"""The numpy float64 reference implementation (being written)."""
