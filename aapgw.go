package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/vigil-guardian/vigil/gateway/aap"
	"github.com/vigil-guardian/vigil/guardian"
	"github.com/vigil-guardian/vigil/guardian/aos"
	"github.com/vigil-guardian/vigil/guardian/auth"
	"github.com/vigil-guardian/vigil/record"
	"github.com/vigil-guardian/vigil/rules"
	"github.com/vigil-guardian/vigil/storage"
)

// aapSpecs is the repeatable --aap NAME=URL flag; VIGIL_AAP lists them comma-separated.
type aapSpecs struct {
	list []string
	// fromEnv is set once the environment was read: the first --aap on the command line
	// then replaces VIGIL_AAP's list, as any flag beats the environment.
	fromEnv bool
}

func (s *aapSpecs) String() string { return strings.Join(s.list, ",") }

func (s *aapSpecs) Set(v string) error {
	if s.fromEnv {
		s.list, s.fromEnv = nil, false
	}
	for _, spec := range strings.Split(v, ",") {
		if spec = strings.TrimSpace(spec); spec == "" {
			continue
		}
		name, _, err := aap.ParseSpec(spec)
		if err != nil {
			return err
		}
		for _, have := range s.list {
			if strings.HasPrefix(have, name+"=") {
				return fmt.Errorf("upstream name %q given twice", name)
			}
		}
		s.list = append(s.list, spec)
	}
	return nil
}

// aapDecider lets the gateways, built before the guardian they call, reach it.
type aapDecider struct{ g *guardian.Guardian }

func (d *aapDecider) DecideStep(ctx context.Context, step *aos.Step, meta guardian.RequestMeta) (guardian.Verdict, record.StepRecord, error) {
	return d.g.DecideStep(ctx, step, meta)
}

func (d *aapDecider) SessionRefusal(ctx context.Context, sessionID, keyID, keyAgent string) string {
	return d.g.SessionRefusal(ctx, sessionID, keyID, keyAgent)
}

// aapMounts builds one AAP gateway per --aap NAME=URL, each behind the agent key check.
// They seal the cursors of their session lists with the key secrets (the guardian's
// database) keeps, so that a cursor opens on every replica and after a restart.
func aapMounts(ctx context.Context, cfg Config, d *aapDecider, az *auth.Auth, engine *rules.Engine, secrets storage.Secrets, log *slog.Logger) ([]func(*http.ServeMux), error) {
	if len(cfg.AAP.list) == 0 {
		return nil, nil
	}
	cursorKey, err := aap.LoadCursorKey(ctx, secrets)
	if err != nil {
		return nil, fmt.Errorf("-aap: %w", err)
	}
	var mounts []func(*http.ServeMux)
	may := aap.RulesMayWithhold(engine, nil)
	for _, spec := range cfg.AAP.list {
		name, upstream, err := aap.ParseSpec(spec)
		if err != nil {
			return nil, fmt.Errorf("-aap: %w", err)
		}
		gw, err := aap.New(aap.Options{
			Name: name, Upstream: upstream, Decider: d, Logger: log,
			MaxBodyBytes: cfg.MaxBodyBytes, MayWithhold: may, KeyOf: auth.KeyOf, CursorKey: cursorKey,
		})
		if err != nil {
			return nil, fmt.Errorf("-aap: %w", err)
		}
		log.Info("AAP gateway", "path", gw.Prefix()+"/", "upstream", upstream)
		mounts = append(mounts, func(mux *http.ServeMux) { gw.Register(mux, az.GatewayMiddleware(aap.Refuse)) })
	}
	return mounts, nil
}
