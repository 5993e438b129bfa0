//go:build !((desktop && production) || dev) && !bindings

package app

import "context"

// Available reports whether this build can open the desktop window: not this one,
// which was built without the desktop tags.
func Available() bool { return false }

// Run returns ErrUnavailable: this build has no desktop window. The caller should serve
// the console over HTTP instead.
func Run(ctx context.Context, opts Options) error {
	if _, err := opts.config(); err != nil {
		return err
	}
	return ErrUnavailable
}
