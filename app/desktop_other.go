//go:build !linux && ((desktop && production) || dev)

package app

import (
	"context"
	"strconv"
	"strings"

	wailsruntime "github.com/wailsapp/wails/v2/pkg/runtime"
)

// editWebview asks the page to run an editing command. macOS never gets here (its
// system Edit menu is used); on Windows the webview's own shortcuts and context menu
// remain the reliable way to paste.
func editWebview(ctx context.Context, cmd EditCommand) {
	wailsruntime.WindowExecJS(ctx, "document.execCommand("+strconv.Quote(webCommand(cmd))+")")
}

func quitWindow(ctx context.Context) { wailsruntime.Quit(ctx) }

// hookWebview has nothing to hook here: a failed load shows the webview's error page,
// and View→Reload retries it.
func hookWebview() {}

// webCommand is cmd as document.execCommand names it.
func webCommand(cmd EditCommand) string {
	switch cmd {
	case EditSelectAll:
		return "selectAll"
	default:
		return strings.ToLower(string(cmd))
	}
}
