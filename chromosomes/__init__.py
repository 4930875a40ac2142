"""Chromosome encodings of mappings: naive, advanced split point, vertical split point."""

from __future__ import annotations

from chromosomes.base import Chromosome
from chromosomes.naive import NaiveChromosome
from chromosomes.split_point import AdvancedChromosome, VerticalChromosome
from dse.errors import DseError
from dse.net.graph import LayerGraph

CHROMOSOMES: dict[str, type[Chromosome]] = {
    "naive": NaiveChromosome,
    "advanced": AdvancedChromosome,
    "vertical": VerticalChromosome,
}


def make_chromosome(
    name: str,
    graph: LayerGraph,
    n_devices: int,
    splits: int | None = None,
    spatial: bool = False,
) -> Chromosome:
    if name not in CHROMOSOMES:
        raise DseError(f"unknown chromosome '{name}': choose one of {', '.join(CHROMOSOMES)}")
    return CHROMOSOMES[name](graph, n_devices, splits=splits, spatial=spatial)


__all__ = [
    "CHROMOSOMES",
    "AdvancedChromosome",
    "Chromosome",
    "NaiveChromosome",
    "VerticalChromosome",
    "make_chromosome",
]
