"""Transitional: moved to the component modules; removed once every importer is switched."""
# ruff: noqa: F401 - re-exports while importers move to the component modules
from attnclaims.reference.params import ROPE_LAYOUTS
from attnclaims.reference.positional import rotary_frequencies, _positions, rotary_angles, rotary_pairs, rotary_embedding
