package cluster

import "time"

// SetHooks makes Run call afterBeat after each heartbeat and afterSweep after each sweep
// (set before Run starts; nil leaves a hook unset).
func SetHooks(r *Registry, afterBeat func(error), afterSweep func()) {
	r.afterBeat, r.afterSweep = afterBeat, afterSweep
}

// ListenRetry is listenRetry, for the external tests.
func ListenRetry(last time.Duration, listened bool) time.Duration { return listenRetry(last, listened) }
