"""The ``tbr`` command: one argparse root (:mod:`.cli`) with a module per subcommand, and the
end-to-end demo (:mod:`.demo`). Tools depend on the packages (extproc, planner, mockpool,
evaluation, devstack), never the reverse."""
