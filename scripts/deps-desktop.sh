#!/usr/bin/env bash
# Installs what the desktop build of vigil needs on Debian/Ubuntu:
#   build:  libgtk-3-dev libwebkit2gtk-4.1-dev (GTK 3 and WebKitGTK 4.1 headers, pkg-config)
#   smoke:  xvfb xauth x11-utils imagemagick curl (scripts/desktop-smoke.sh)
#
#   scripts/deps-desktop.sh [build|smoke|all]     (default: all)
#
# Installs with apt-get when run as root and something is missing; otherwise prints the
# exact command to run and exits 1. Exits 0 when everything is already there.
set -euo pipefail

what=${1:-all}
build_pkgs=(libgtk-3-dev libwebkit2gtk-4.1-dev pkg-config)
smoke_pkgs=(xvfb xauth x11-utils imagemagick curl)
case $what in
build) want=("${build_pkgs[@]}") ;;
smoke) want=("${smoke_pkgs[@]}") ;;
all) want=("${build_pkgs[@]}" "${smoke_pkgs[@]}") ;;
*)
	echo "usage: $0 [build|smoke|all]" >&2
	exit 2
	;;
esac

missing=()
for p in "${want[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
	echo "deps-desktop: ${what} packages present"
	exit 0
fi

if ! command -v apt-get >/dev/null; then
	echo "deps-desktop: missing ${missing[*]}; this is not a Debian-like system: install GTK 3 and WebKitGTK 4.1 development files (and Xvfb, xwininfo, ImageMagick, curl for the smoke test) with your package manager" >&2
	exit 1
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "deps-desktop: missing packages; run:" >&2
	echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
	exit 1
fi

echo "deps-desktop: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}"
for p in "${missing[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || {
		echo "deps-desktop: $p still missing after apt-get install" >&2
		exit 1
	}
done
echo "deps-desktop: installed ${missing[*]}"
