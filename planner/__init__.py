"""Capacity planner: closed-form cost model, per-pool sizing and a discrete-event fleet simulator."""
