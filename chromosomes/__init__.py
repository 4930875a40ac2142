"""Chromosome encodings of mappings: naive, advanced split point, vertical split point."""
