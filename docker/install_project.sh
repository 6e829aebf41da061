#!/bin/sh
# Installs the project (copied to the build stage's working directory) into the /opt/tbr venv
# without touching its locked dependencies, built by the locked setuptools (no build isolation),
# then strips what the runtime does not need.
#
# The estimator's C run counter (extproc/core/text/_runscan.c) needs a C compiler and the Python
# headers; a slim base has neither, so this build stage installs them (apt) when missing. They stay
# in the build stage: the final images copy only /opt/tbr. Without apt access the install goes on
# and the router counts with numpy (it logs so at start-up; tbr_build_info{run_counter="numpy"}).
set -eu
has_headers() { python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("include"), "Python.h")))'; }
if ! command -v cc >/dev/null 2>&1 || ! has_headers; then
  pkgs="gcc libc6-dev"
  has_headers || pkgs="$pkgs python3-dev"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends $pkgs >/dev/null; } \
    || echo "install_project: could not install $pkgs; the run counter falls back to numpy" >&2
fi
pip install -q --no-deps --no-compile --no-build-isolation .
python3 -c 'from extproc.core.text.runs import RUNSCAN; print("install_project: run counter", RUNSCAN)'
# The image's entry point: fail the build, not the container, when it is missing.
command -v tbr >/dev/null || { echo "install_project: no tbr entry point (pyproject.toml not copied?)" >&2; exit 1; }
# The runtime needs neither the installer nor the build backend.
pip uninstall -q -y pip setuptools wheel
python3 -m compileall -q /opt/tbr/lib
