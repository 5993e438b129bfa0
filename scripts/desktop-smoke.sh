#!/usr/bin/env bash
# Desktop smoke test: runs a desktop build of vigil under Xvfb, waits for the guardian
# and the window, screenshots the screen, checks the picture is not blank, closes the
# window and expects a clean exit.
#
#   scripts/desktop-smoke.sh BINARY [SCREENSHOT.png]
#
# BINARY must be built with -tags desktop,production,webkit2_41. Needs Xvfb, xwininfo
# (x11-utils), imagemagick and curl (scripts/deps-desktop.sh installs them).
#
# Environment:
#   SMOKE_CLOSE        how to close the window: wm (the close button's WM_DELETE_WINDOW,
#                      sent with python3), key (Ctrl+Q = File→Quit, needs xdotool),
#                      signal (SIGTERM), or auto (default: the first one available)
#   SMOKE_TIMEOUT      seconds allowed for each wait (default 60)
#   SMOKE_MIN_COLOURS  distinct colours the page must show (default 16)
#   SMOKE_SETTLE       seconds the console gets to load after first paint (default 3)
#   SMOKE_KEEP=1       keep the temp directory (database, logs, screenshots)
set -uo pipefail

BIN=${1:-}
SHOT=${2:-}
TIMEOUT=${SMOKE_TIMEOUT:-60}
MIN_COLOURS=${SMOKE_MIN_COLOURS:-16}

fail() {
	echo "desktop smoke: FAIL: $*" >&2
	if [[ -n ${WORK:-} && -f $WORK/vigil.log ]]; then
		echo "--- vigil log (last 40 lines) ---" >&2
		tail -n 40 "$WORK/vigil.log" >&2
	fi
	echo "desktop smoke: 0 passed, 1 failed"
	exit 1
}

[[ -n $BIN ]] || { echo "usage: $0 BINARY [SCREENSHOT.png]" >&2; exit 2; }
[[ -x $BIN ]] || fail "$BIN is not an executable file"
for tool in Xvfb xwininfo import convert curl; do
	command -v "$tool" >/dev/null || fail "$tool not found (run scripts/deps-desktop.sh)"
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/vigil-desktop-smoke.XXXXXX")
XVFB_PID=
APP_PID=
cleanup() {
	[[ -n $APP_PID ]] && kill -KILL "$APP_PID" 2>/dev/null
	[[ -n $XVFB_PID ]] && kill "$XVFB_PID" 2>/dev/null && wait "$XVFB_PID" 2>/dev/null
	if [[ ${SMOKE_KEEP:-0} == 1 ]]; then
		echo "desktop smoke: kept $WORK"
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
[[ -n $SHOT ]] || SHOT=$WORK/screenshot.png

# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND until it succeeds or time is up.
wait_for() {
	local secs=$1 what=$2
	shift 2
	local deadline=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS >= deadline)); then
			fail "timed out after ${secs}s waiting for $what"
		fi
		if [[ -n $APP_PID ]] && ! kill -0 "$APP_PID" 2>/dev/null; then
			local status=0
			wait "$APP_PID" || status=$?
			APP_PID=
			fail "vigil exited (status $status) while waiting for $what"
		fi
		sleep 0.2
	done
}

# A display number nobody holds: no lock file and no socket.
DISPLAY_NUM=
for n in $(seq 90 140); do
	if [[ ! -e /tmp/.X$n-lock && ! -e /tmp/.X11-unix/X$n ]]; then
		DISPLAY_NUM=$n
		break
	fi
done
[[ -n $DISPLAY_NUM ]] || fail "no free X display between :90 and :140"

Xvfb ":$DISPLAY_NUM" -screen 0 1400x900x24 -nolisten tcp >"$WORK/xvfb.log" 2>&1 &
XVFB_PID=$!
export DISPLAY=":$DISPLAY_NUM"
unset WAYLAND_DISPLAY
wait_for 15 "Xvfb on $DISPLAY" xwininfo -root

echo "desktop smoke: starting $BIN on $DISPLAY"
# Port 0: the guardian binds a port of its own and prints it, so nothing else (another
# guardian, another test) can take it between a pick and the bind, or answer in its place.
# Xvfb has no accessibility bus: keep GTK from looking for one.
env NO_AT_BRIDGE=1 GTK_A11Y=none \
	"$BIN" --addr "127.0.0.1:0" --db "$WORK/vigil.db" >"$WORK/vigil.log" 2>&1 &
APP_PID=$!
listening() { grep -qo 'listening on http://127\.0\.0\.1:[0-9]*' "$WORK/vigil.log"; }
wait_for "$TIMEOUT" "the guardian's address in its log" listening
URL=$(grep -o 'listening on http://127\.0\.0\.1:[0-9]*' "$WORK/vigil.log" | head -1 | sed 's/^listening on //')
echo "desktop smoke: guardian $URL"

wait_for "$TIMEOUT" "the guardian at $URL/api/info" curl -fsS --max-time 2 "$URL/api/info"
# The toplevel whose title starts with "Vigil" (GTK's client-leader window carries the
# name only in its class, which this pattern does not match).
vigil_window() { xwininfo -root -tree | awk '/^ *0x[0-9a-f]+ "Vigil/ {print $1; exit}'; }
window_exists() { [[ -n $(vigil_window) ]]; }
wait_for "$TIMEOUT" "the Vigil window" window_exists

WID=$(vigil_window)

# content_colours: distinct colours in the window below its menu bar (the webview).
content_colours() {
	import -window "$WID" "$WORK/window.png" 2>>"$WORK/import.log" || { echo 0; return; }
	convert "$WORK/window.png" -crop +0+"$MENU_PX" +repage -format '%k' info: 2>/dev/null || echo 0
}
MENU_PX=${SMOKE_MENU_PX:-40}

# The window exists before its webview has painted anything but the background colour:
# poll until the page (the start page or the console) has drawn text and images.
colours=0
deadline=$((SECONDS + TIMEOUT))
until ((colours >= MIN_COLOURS)); do
	((SECONDS >= deadline)) && fail "window content stayed blank ($colours colours < $MIN_COLOURS) after ${TIMEOUT}s"
	kill -0 "$APP_PID" 2>/dev/null || fail "vigil exited while waiting for the window to paint"
	sleep 0.3
	colours=$(content_colours)
done
# First paint may still be the start page: give the console SMOKE_SETTLE seconds to load
# its data before the screenshot that is kept.
settle=$((SECONDS + ${SMOKE_SETTLE:-3}))
while ((SECONDS < settle)); do
	sleep 0.5
	kill -0 "$APP_PID" 2>/dev/null || fail "vigil exited while the console was loading"
done
import -window root "$SHOT" 2>>"$WORK/import.log" || fail "could not take a screenshot"
colours=$(content_colours)
((colours >= MIN_COLOURS)) || fail "window content went blank ($colours colours) after loading"
echo "desktop smoke: window painted ($colours colours in the page), screenshot $SHOT"

# wm_close WINDOW: sends WM_DELETE_WINDOW, exactly what a window manager sends when the
# user clicks the close button (Xvfb runs no window manager to click).
wm_close() {
	"$PYTHON" - "$1" <<'PY'
import ctypes, sys
x = ctypes.cdll.LoadLibrary("libX11.so.6")
x.XOpenDisplay.restype = ctypes.c_void_p
x.XOpenDisplay.argtypes = [ctypes.c_char_p]
x.XInternAtom.restype = ctypes.c_ulong
x.XInternAtom.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
x.XSendEvent.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int, ctypes.c_long, ctypes.c_void_p]
x.XFlush.argtypes = [ctypes.c_void_p]
x.XCloseDisplay.argtypes = [ctypes.c_void_p]

class ClientMessage(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("serial", ctypes.c_ulong), ("send_event", ctypes.c_int),
                ("display", ctypes.c_void_p), ("window", ctypes.c_ulong),
                ("message_type", ctypes.c_ulong), ("format", ctypes.c_int), ("l", ctypes.c_long * 5)]

class XEvent(ctypes.Union):
    _fields_ = [("xclient", ClientMessage), ("pad", ctypes.c_long * 24)]

d = x.XOpenDisplay(None)
if not d:
    sys.exit("cannot open display")
wid = int(sys.argv[1], 0)
ev = XEvent()
ev.xclient.type = 33  # ClientMessage
ev.xclient.window = wid
ev.xclient.message_type = x.XInternAtom(d, b"WM_PROTOCOLS", 0)
ev.xclient.format = 32
ev.xclient.l[0] = x.XInternAtom(d, b"WM_DELETE_WINDOW", 0)
if not x.XSendEvent(d, wid, 0, 0, ctypes.byref(ev)):
    sys.exit("XSendEvent failed")
x.XFlush(d)
x.XCloseDisplay(d)
PY
}

# Prefer the system interpreter: version-manager shims can take seconds to start.
PYTHON=
for p in /usr/bin/python3 "$(command -v python3 || true)"; do
	if [[ -n $p && -x $p ]]; then PYTHON=$p; break; fi
done

CLOSE=${SMOKE_CLOSE:-auto}
if [[ $CLOSE == auto ]]; then
	if [[ -n $PYTHON ]]; then CLOSE=wm
	elif command -v xdotool >/dev/null; then CLOSE=key
	else CLOSE=signal
	fi
fi
case $CLOSE in
wm)
	how="the window's close request (WM_DELETE_WINDOW)"
	[[ -n $PYTHON ]] || fail "SMOKE_CLOSE=wm needs python3"
	wm_close "$WID" || fail "could not send WM_DELETE_WINDOW to $WID"
	;;
key)
	how="File→Quit (Ctrl+Q) via xdotool"
	command -v xdotool >/dev/null || fail "SMOKE_CLOSE=key needs xdotool"
	xdotool windowfocus --sync "$WID" key --clearmodifiers ctrl+q || fail "xdotool could not send Ctrl+Q"
	;;
signal)
	how="SIGTERM"
	kill -TERM "$APP_PID"
	;;
*) fail "SMOKE_CLOSE must be auto, wm, key or signal (got $CLOSE)" ;;
esac
echo "desktop smoke: closing the window with $how"

deadline=$((SECONDS + 20))
while kill -0 "$APP_PID" 2>/dev/null; do
	((SECONDS >= deadline)) && fail "vigil still running 20s after $how"
	sleep 0.2
done
wait "$APP_PID"
status=$?
APP_PID=
((status == 0)) || fail "vigil exited with status $status after $how"
curl -fsS --max-time 2 "$URL/api/info" >/dev/null 2>&1 && fail "the guardian still answers after vigil exited"

echo "desktop smoke: vigil exited cleanly"
echo "desktop smoke: 1 passed, 0 failed"
