"""The planner's commands (``tbr plan``, ``simulate``, ``autoscale``, ``profile``, ``results``, …):
argument parsing and the glue that calls the model, the simulator and the reports.
"""
