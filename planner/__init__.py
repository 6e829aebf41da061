"""Capacity planner: closed-form cost model, per-pool sizing and a discrete-event fleet simulator.

Subpackages (a higher one may import a lower one, never the reverse; import-linter contracts):
:mod:`.cli` (the commands) > :mod:`.report` (tables, documents, plots, emitted files) >
:mod:`.des` (the simulator and what runs it) > :mod:`.model` (closed forms, profiles) >
:mod:`.workload` (traces and length distributions).
"""
