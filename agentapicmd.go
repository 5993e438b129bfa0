package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/vigil-guardian/vigil/gateway"
	"github.com/vigil-guardian/vigil/gateway/agentapi"
	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/auth"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/storage"
)

// lateGuardian is the guardian for routes mounted while it is being built; they are
// served only once it exists.
type lateGuardian struct{ g **guardian.Guardian }

func (l lateGuardian) DecideStep(ctx context.Context, step *aos.Step, meta guardian.RequestMeta) (guardian.Verdict, record.StepRecord, error) {
	return (*l.g).DecideStep(ctx, step, meta)
}

func (l lateGuardian) MayAct(step *aos.Step, meta guardian.RequestMeta) bool {
	return (*l.g).MayAct(step, meta)
}

// agentAPIRoutes builds the --agentapi gateways; their routes need an agent key as /aos
// does (in X-Vigil-Key, since the client's Authorization belongs to the upstream). With
// --agentapi-approvals client they keep their verdicts on approval requests in approvals,
// the guardian's database, so that a client's answer is known to every replica and after
// a restart.
func agentAPIRoutes(cfg Config, az *auth.Auth, g **guardian.Guardian, approvals storage.Approvals, log *slog.Logger) ([]func(*http.ServeMux), error) {
	var mounts []func(*http.ServeMux)
	seen := map[string]bool{}
	for _, u := range cfg.AgentAPI {
		name, url, err := gateway.ParseUpstream(u)
		if err != nil {
			return nil, fmt.Errorf("-agentapi: %w", err)
		}
		if seen[name] {
			return nil, fmt.Errorf("-agentapi: the name %q is given twice", name)
		}
		seen[name] = true
		gw, err := agentapi.New(agentapi.Config{Name: name, URL: url, Approvals: cfg.AgentAPIApprovals, MaxBodyBytes: cfg.MaxBodyBytes},
			agentapi.Options{Decider: lateGuardian{g}, Logger: log, Wrap: az.GatewayMiddleware(agentapi.Refuse), KeyOf: auth.KeyOf,
				Approvals: approvals})
		if err != nil {
			return nil, err
		}
		log.Info("agent api gateway", "route", "/agentapi/"+name+"/process", "upstream", url)
		mounts = append(mounts, gw.Register)
	}
	return mounts, nil
}
