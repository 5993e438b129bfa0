// Command genicon writes Vigil's application icon (app.Icon) to a PNG file; `go generate
// ./app` runs it to refresh build/appicon.png.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/vigil-guardian/vigil/app"
)

func main() {
	size := flag.Int("size", 1024, "width and height in pixels")
	out := flag.String("o", "appicon.png", "output file")
	flag.Parse()
	png, err := app.Icon(*size)
	if err == nil {
		err = os.WriteFile(*out, png, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "genicon:", err)
		os.Exit(1)
	}
}
