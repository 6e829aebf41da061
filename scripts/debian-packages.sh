#!/usr/bin/env bash
# Make sure the named commands are on PATH, installing their Debian packages when they are not:
#   scripts/debian-packages.sh COMMAND[=PACKAGE] ...      e.g. redis-server wrk hey
# As root with apt-get (CI, the machines this is developed on) it installs what is missing; anywhere
# else it prints one line naming the packages to install and exits 1.
set -euo pipefail
missing=()
for spec in "$@"; do
  cmd="${spec%%=*}"; pkg="${spec#*=}"
  command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian packages: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  { apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; } \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
  exit 0
fi
echo "missing commands: install the Debian/Ubuntu packages ${missing[*]} (e.g. sudo apt-get install ${missing[*]})" >&2
exit 1
