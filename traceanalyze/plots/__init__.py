"""Plots: take an analysis frame, return a matplotlib `Figure`. Never `plt.show()`.

Figures are built with `matplotlib.figure.Figure` directly (no pyplot global state), so they work
headless; `fig.savefig("x.png" | "x.svg")` renders with Agg / the SVG backend. Every axis is
labelled with its unit.
"""
