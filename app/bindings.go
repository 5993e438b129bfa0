//go:build bindings && !((desktop && production) || dev)

package app

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"github.com/wailsapp/wails/v2"
	"github.com/wailsapp/wails/v2/pkg/options"
	"github.com/wailsapp/wails/v2/pkg/options/assetserver"
)

// The Wails CLI (`wails build`, `wails dev`) first compiles the program with the
// bindings tag and runs it to generate JavaScript bindings. Vigil binds no Go methods,
// so such a binary writes the (empty) bindings and exits here, before main would start
// a guardian.
func init() {
	err := wails.Run(&options.App{
		Title:       "Vigil",
		AssetServer: &assetserver.Options{Handler: http.NotFoundHandler()},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "vigil: generating Wails bindings:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Available reports false: a bindings build never opens a window.
func Available() bool { return false }

// Run is never reached in a bindings build (init exits first).
func Run(context.Context, Options) error { return ErrUnavailable }
