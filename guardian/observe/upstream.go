package observe

// UpstreamErrors counts failures of a gateway's upstream (the agent server an AAP, Agent
// API or MCP gateway forwards to). Gateways take one in their options and call it where a
// forwarded request fails; the metrics package implements it as
// vigil_gateway_upstream_errors_total{gateway,reason}.
//
// gateway is the upstream's configured NAME (--aap NAME=URL); reason is one of a small
// fixed set the gateway chooses, such as "connect", "timeout", "status" (an HTTP error
// status) or "protocol" (an answer the gateway could not read). Never pass ids, URLs or
// error texts: every distinct value is a time series kept for the life of the process.
type UpstreamErrors interface {
	UpstreamError(gateway, reason string)
}

// NoUpstreamErrors counts nothing: the default for a gateway built without metrics.
type NoUpstreamErrors struct{}

// UpstreamError implements UpstreamErrors.
func (NoUpstreamErrors) UpstreamError(string, string) {}
