"""Figures. Computations are plain functions on arrays; plotting lives beside them."""
