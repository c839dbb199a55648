#!/bin/sh
# Installs the Debian packages named on the command line that are missing: with apt-get when
# run as root, otherwise prints the exact command and fails.
missing=""
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
    echo "installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing >/dev/null ||
        { echo "apt-get install failed for:$missing" >&2; exit 1; }
else
    echo "missing Debian packages; run as root:" >&2
    echo "  sudo apt-get install -y$missing" >&2
    exit 1
fi
