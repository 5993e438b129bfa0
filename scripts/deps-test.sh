#!/usr/bin/env bash
# Installs what the tests need from Debian's packages: chromium for the end-to-end tests,
# Xvfb and imagemagick for the desktop smoke test, PostgreSQL for the PostgreSQL backend
# and replica tests (they run the server binaries themselves, as the postgres user, in a
# temporary directory; the package's own cluster is not used).
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v Xvfb >/dev/null 2>&1 || need+=(xvfb xauth)
command -v import >/dev/null 2>&1 || need+=(imagemagick)
command -v xdotool >/dev/null 2>&1 || need+=(xdotool)
command -v xwininfo >/dev/null 2>&1 || need+=(x11-utils)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
	echo "The tests need these Debian packages: ${need[*]}" >&2
	echo "Install them with: sudo apt-get install -y ${need[*]}" >&2
	exit 1
fi
echo "Installing ${need[*]} ..."
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
