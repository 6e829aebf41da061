#!/bin/sh
# Installs the project (copied to the build stage's working directory) into the /opt/tbr venv
# without touching its pinned dependencies, then strips what the runtime does not need.
set -eu
pip install -q --no-deps --no-compile .
# The runtime needs neither the installer nor setuptools.
pip uninstall -q -y pip setuptools
python3 -m compileall -q /opt/tbr/lib
