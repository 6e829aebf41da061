"""What the planner prints and writes: plan, simulate and fleet tables, the results document and its
generator, plots, doc sections and emitted deployment files.
"""
