"""Analyses: pure functions, frames in and frame out. No I/O, no plotting."""
