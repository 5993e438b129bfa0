// Command loadgen measures the guardian under many concurrent agents against a floor: a
// no-op JSON-RPC server answering allow without doing anything else. Both run as separate
// processes on loopback and get the same traffic, so the ratio shows what Vigil costs. Each
// level alternates floor and guardian over several rounds, so a busy machine slows both alike.
//
//	go run ./bench/loadgen -vigil ./bin/vigil -concurrency 1,8,32 -duration 3s -rounds 5
//
// With -vs-no-rules a second guardian without rules is measured in the same rounds, and the
// rules' cost is the paired ratio of the two. -session-steps starts a new session after that
// many steps; -sessions spreads the agents' steps round-robin over that many sessions (a
// list: each is a level, compared with the first). -interleave measures the guardians with
// and without rules together, in alternating slices, instead of one after the other.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "noop-server" {
		if err := serveNoop(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "noop-server:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

type options struct {
	vigil       string
	target      string
	rules       string
	duration    time.Duration
	warmup      time.Duration
	concurrency []int
	rounds      int
	markdown    bool
	vsNoRules   bool
	// interleave, when set, measures the guardians with and without rules in alternating
	// slices of this length instead of one after the other.
	interleave time.Duration
	// opa is the bench/opa server binary to compare with (none: no comparison).
	opa string
	// sessionSteps ends a session after that many steps (0: never).
	sessionSteps int
	// sessions are the levels of concurrently active sessions (none: one per agent).
	sessions []int
}

func run() error {
	var o options
	var conc string
	flag.StringVar(&o.vigil, "vigil", "./bin/vigil", "vigil binary to start with 'serve' on a temporary database")
	flag.StringVar(&o.target, "target", "", "measure an already running guardian at this /aos URL instead of starting one; several comma-separated URLs (replicas) get the agents round-robin, as behind a load balancer")
	flag.StringVar(&o.rules, "rules", "", "rules file passed to vigil serve --rules")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "measuring time per concurrency level")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured warm-up per level")
	flag.StringVar(&conc, "concurrency", "1,8,32", "comma-separated numbers of concurrent agents")
	flag.IntVar(&o.rounds, "rounds", 3, "measurements of floor and guardian, alternating, per concurrency level")
	flag.BoolVar(&o.markdown, "markdown", true, "print a Markdown table")
	flag.BoolVar(&o.vsNoRules, "vs-no-rules", false, "also measure a guardian without rules and report the rules' throughput against it")
	flag.DurationVar(&o.interleave, "interleave", 0, "with -vs-no-rules: measure the two guardians in alternating slices of this length (e.g. 100ms) instead of one after the other")
	flag.StringVar(&o.opa, "opa", "", "also measure this bench/opa server (OPA with four Rego rules, no storage) and report the guardian's throughput against it")
	flag.IntVar(&o.sessionSteps, "session-steps", 0, "start a new session after this many steps (0: one session per agent for the whole run)")
	var sess string
	flag.StringVar(&sess, "sessions", "", "comma-separated numbers of concurrently active sessions the agents' steps are spread over, round-robin; each is measured against the first")
	flag.Parse()
	if sess != "" {
		for _, f := range strings.Split(sess, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("-sessions: %q is not a positive integer", f)
			}
			o.sessions = append(o.sessions, n)
		}
	}
	for _, f := range strings.Split(conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-concurrency: %q is not a positive integer", f)
		}
		o.concurrency = append(o.concurrency, n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	floorURL, stopFloor, err := startNoop(ctx)
	if err != nil {
		return err
	}
	defer stopFloor()

	target := o.target
	pid := 0 // the guardian's process, when started here
	if target == "" {
		url, p, stop, err := startVigil(ctx, o.vigil, o.rules)
		if err != nil {
			return err
		}
		defer stop()
		target, pid = url, p
	}

	if o.rounds < 1 {
		return fmt.Errorf("-rounds: %d is not a positive integer", o.rounds)
	}
	if len(o.sessions) > 0 {
		return runSessions(o, target, pid)
	}
	baseline, basePID := "", 0
	if o.interleave < 0 || (o.interleave > 0 && !o.vsNoRules) {
		return errors.New("-interleave needs -vs-no-rules and a positive duration")
	}
	if o.vsNoRules {
		if o.target != "" || o.rules == "" {
			return errors.New("-vs-no-rules needs -rules and no -target")
		}
		url, p, stop, err := startVigil(ctx, o.vigil, "")
		if err != nil {
			return err
		}
		defer stop()
		baseline, basePID = url, p
	}
	opaURL, opaPID := "", 0
	if o.opa != "" {
		url, p, stop, err := startOPA(ctx, o.opa)
		if err != nil {
			return err
		}
		defer stop()
		opaURL, opaPID = url, p
	}
	load := traffic{sessionSteps: o.sessionSteps}
	type row struct {
		c                        int
		floor, vigil, noRul, opa result
		// Medians over the rounds of the paired ratios: each round measures the floor and
		// the guardian back to back, so a busy machine slows both alike.
		rpsRatio, p50Ratio float64
		rulesRps, rulesP50 float64
		opaRps, opaP50     float64
		// The rounds' own ratios, to show their spread.
		eachRules, eachRulesP50, eachOPA []float64
	}
	var rows []row
	for _, c := range o.concurrency {
		var fs, vs, ns, opas []result
		var rpsRatios, p50Ratios, rulesRps, rulesP50, opaRps, opaP50 []float64
		for range o.rounds {
			f, err := drive(floorURL, c, o.warmup, o.duration, load)
			if err != nil {
				return fmt.Errorf("floor at %d: %w", c, err)
			}
			var v, n result
			if baseline != "" && o.interleave > 0 {
				rs, err := driveEach([]string{target, baseline}, []traffic{load.of(pid), load.of(basePID)}, c, o.warmup, o.duration, o.interleave)
				if err != nil {
					return fmt.Errorf("vigil with and without rules at %d: %w", c, err)
				}
				v, n = rs[0], rs[1]
			} else {
				v, err = drive(target, c, o.warmup, o.duration, load.of(pid))
				if err != nil {
					return fmt.Errorf("vigil at %d: %w", c, err)
				}
			}
			fs, vs = append(fs, f), append(vs, v)
			rpsRatios = append(rpsRatios, v.rps/f.rps)
			p50Ratios = append(p50Ratios, float64(v.p50)/float64(f.p50))
			if baseline != "" {
				if o.interleave == 0 {
					n, err = drive(baseline, c, o.warmup, o.duration, load.of(basePID))
					if err != nil {
						return fmt.Errorf("vigil without rules at %d: %w", c, err)
					}
				}
				ns = append(ns, n)
				rulesRps = append(rulesRps, v.rps/n.rps)
				rulesP50 = append(rulesP50, float64(v.p50)/float64(n.p50))
			}
			if opaURL != "" {
				op, err := drive(opaURL, c, o.warmup, o.duration, load.of(opaPID))
				if err != nil {
					return fmt.Errorf("OPA at %d: %w", c, err)
				}
				opas = append(opas, op)
				opaRps = append(opaRps, v.rps/op.rps)
				opaP50 = append(opaP50, float64(v.p50)/float64(op.p50))
			}
		}
		r := row{c: c, floor: combine(fs), vigil: combine(vs), rpsRatio: median(rpsRatios), p50Ratio: median(p50Ratios)}
		if baseline != "" {
			r.noRul, r.rulesRps, r.rulesP50 = combine(ns), median(rulesRps), median(rulesP50)
			r.eachRules, r.eachRulesP50 = rulesRps, rulesP50
		}
		if opaURL != "" {
			r.opa, r.opaRps, r.opaP50 = combine(opas), median(opaRps), median(opaP50)
			r.eachOPA = opaRps
		}
		rows = append(rows, r)
	}
	if o.sessionSteps > 0 {
		fmt.Printf("Sessions of %d steps.\n\n", o.sessionSteps)
	}
	head := "| agents | target | req/s | p50 | p90 | p99 | errors | CPU per step | throughput vs floor | p50 vs floor |"
	align := "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
	blank := ""
	if baseline != "" {
		head += " throughput vs no rules | p50 vs no rules | CPU per step vs no rules |"
		align += "---:|---:|---:|"
		blank += " | | |"
	}
	if opaURL != "" {
		head += " throughput vs OPA | p50 vs OPA |"
		align += "---:|---:|"
		blank += " | |"
	}
	fmt.Println(head)
	fmt.Println(align)
	line := func(c int, name string, r result, rest string) {
		fmt.Printf("| %d | %s | %.0f | %s | %s | %s | %d | %s |%s\n", c, name, r.rps, us(r.p50), us(r.p90), us(r.p99), r.errors, cpuText(r.cpu), rest)
	}
	for _, r := range rows {
		line(r.c, "no-op floor", r.floor, " | |"+blank)
		if baseline != "" {
			line(r.c, "vigil, no rules", r.noRul, " | |"+blank)
		}
		if opaURL != "" {
			line(r.c, "OPA, 4 Rego rules, no storage", r.opa, " | |"+blank)
		}
		rest := fmt.Sprintf(" %.0f %% | %.2fx |", 100*r.rpsRatio, r.p50Ratio)
		if baseline != "" {
			rest += fmt.Sprintf(" %.0f %% | %.2fx | %s |", 100*r.rulesRps, r.rulesP50, cpuRatio(r.vigil.cpu, r.noRul.cpu))
		}
		if opaURL != "" {
			rest += fmt.Sprintf(" %.2fx | %.2fx |", r.opaRps, r.opaP50)
		}
		line(r.c, "vigil", r.vigil, rest)
	}
	for _, r := range rows {
		if baseline != "" {
			fmt.Printf("\n%d agents, each round's throughput vs no rules: %s; p50 vs no rules: %s", r.c, list(r.eachRules, "%.0f %%", 100), list(r.eachRulesP50, "%.2fx", 1))
		}
		if opaURL != "" {
			fmt.Printf("\n%d agents, each round's throughput vs OPA: %s", r.c, list(r.eachOPA, "%.2fx", 1))
		}
	}
	if baseline != "" || opaURL != "" {
		fmt.Println()
	}
	fmt.Printf("\n%d rounds per level, floor and vigil alternating, %s each after %s of warm-up: req/s is the median round,\n"+
		"latencies are over all rounds' requests, the ratios are the medians of the rounds' paired ratios.\n"+
		"CPU per step is the server process's CPU time (all its threads, SQLite's included) per request\n"+
		"answered while measuring, the median round's; CPU per step vs no rules is the no-rules guardian's\n"+
		"over the guardian's with rules, what the throughput ratio would be if CPU alone decided it.\n",
		o.rounds, o.duration, o.warmup)
	if baseline != "" && o.interleave > 0 {
		fmt.Printf("The guardians with and without rules are measured together, in alternating slices of %s\n"+
			"(%s each in all), not one after the other.\n", o.interleave, o.duration)
	}
	for _, r := range rows {
		if n := r.vigil.errors + r.noRul.errors + r.opa.errors; n > 0 {
			return fmt.Errorf("%d failed requests at %d agents", n, r.c)
		}
	}
	return nil
}

// runSessions measures the guardian with the agents' steps spread over each number of
// sessions against the first number. Every session gets a step before a level is measured,
// so all of them are active. Each round measures every other level between two
// measurements of the first (A B A C A …), and a level's ratio is against the mean of the
// two around it: the machine's load drifting during a round moves both sides alike. pid,
// when the guardian was started here, is its process, whose resident memory is read as
// each level's sessions are created.
func runSessions(o options, target string, pid int) error {
	c := o.concurrency[len(o.concurrency)-1]
	rs := make([][]result, len(o.sessions))
	ratios := make([][]float64, len(o.sessions))
	// perSession is the growth of the guardian's resident memory while a level's sessions
	// were created and first measured, per session (0: unknown; the first level's few
	// sessions say nothing about it).
	perSession := make([]float64, len(o.sessions))
	measure := func(round, i int) (result, error) {
		n := o.sessions[i]
		load := traffic{sessions: n, sessionSteps: o.sessionSteps, prefix: fmt.Sprintf("s%d-", n)}
		var before int64
		if round == 0 {
			load.warmSteps = n // the first round makes every session exist
			before = rss(pid)
		}
		r, err := drive(target, c, o.warmup, o.duration, load.of(pid))
		if err != nil {
			return r, fmt.Errorf("vigil with %d sessions: %w", n, err)
		}
		if after := rss(pid); round == 0 && i > 0 && before > 0 && after > 0 {
			perSession[i] = float64(after-before) / float64(n)
		}
		rs[i] = append(rs[i], r)
		return r, nil
	}
	for round := range o.rounds {
		a, err := measure(round, 0)
		if err != nil {
			return err
		}
		ratios[0] = append(ratios[0], 1)
		for i := 1; i < len(o.sessions); i++ {
			r, err := measure(round, i)
			if err != nil {
				return err
			}
			next, err := measure(round, 0)
			if err != nil {
				return err
			}
			ratios[i] = append(ratios[i], r.rps/((a.rps+next.rps)/2))
			a = next
		}
	}
	fmt.Printf("%d agents, steps spread round-robin over the sessions.\n\n", c)
	fmt.Printf("| sessions | req/s | p50 | p90 | p99 | errors | throughput vs %d sessions | each round's ratio | CPU per step | CPU per step vs %d sessions | written per step | memory per session |\n"+
		"|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|\n", o.sessions[0], o.sessions[0])
	for i, n := range o.sessions {
		r := combine(rs[i])
		each := make([]string, len(ratios[i]))
		for k, x := range ratios[i] {
			each[k] = fmt.Sprintf("%.0f %%", 100*x)
		}
		mem := "n/a"
		if perSession[i] > 0 {
			mem = fmt.Sprintf("%.1f KB", perSession[i]/1000)
		}
		written := "n/a"
		if r.wrote > 0 {
			written = fmt.Sprintf("%.1f KB", r.wrote/1000)
		}
		fmt.Printf("| %d | %.0f | %s | %s | %s | %d | %.0f %% | %s | %s | %s | %s | %s |\n", n, r.rps, us(r.p50), us(r.p90), us(r.p99), r.errors,
			100*median(ratios[i]), strings.Join(each, ", "), cpuText(r.cpu), cpuRatio(r.cpu, combine(rs[0]).cpu), written, mem)
		if r.errors > 0 {
			defer fmt.Fprintf(os.Stderr, "loadgen: %d failed requests with %d sessions\n", r.errors, n)
		}
	}
	fmt.Printf("\n%d rounds, each measuring %d sessions before and after every other level, %s each after %s of\n"+
		"warm-up (the first round's warm-up lasts until every session has a step): req/s is the median\n"+
		"round; a level's ratio in a round is against the mean of the two measurements of %d sessions\n"+
		"around it, and the table's is the median of the rounds'. Memory per session is the growth of the\n"+
		"guardian's resident memory while the level's sessions were created and first measured, divided by\n"+
		"their number: it includes SQLite's page cache and the collector's headroom, so it bounds the\n"+
		"session cache's share from above. CPU per step is the guardian's CPU time per request answered\n"+
		"while measuring, written per step the bytes it wrote (journal, SQLite's WAL and checkpoints, answers),\n"+
		"the median round's.\n",
		o.rounds, o.sessions[0], o.duration, o.warmup, o.sessions[0])
	return nil
}

// rss is the resident memory of process pid in bytes, 0 when it cannot be read (no pid, or
// no /proc).
func rss(pid int) int64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

func us(d time.Duration) string { return fmt.Sprintf("%d µs", d.Microseconds()) }

// list formats xs, each multiplied by scale, with format.
func list(xs []float64, format string, scale float64) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf(format, x*scale)
	}
	return strings.Join(out, ", ")
}

// cpuText is a CPU time per request, "n/a" when unknown.
func cpuText(d time.Duration) string {
	if d <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f µs", float64(d)/1e3)
}

// cpuRatio is b's CPU per request over a's: what a's throughput would be against b's if
// CPU alone decided it.
func cpuRatio(a, b time.Duration) string {
	if a <= 0 || b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f %%", 100*float64(b)/float64(a))
}

type result struct {
	rps           float64
	p50, p90, p99 time.Duration
	errors        int64
	lat           []time.Duration // sorted
	// cpu is the server's CPU time per answered request while measuring (0: unknown).
	cpu time.Duration
	// wrote is the bytes the server wrote to files and sockets per answered request
	// while measuring (0: unknown).
	wrote float64
}

// traffic says how steps are spread over sessions.
type traffic struct {
	// sessions, when set, is how many sessions the agents share round-robin; otherwise
	// each agent has its own.
	sessions int
	// sessionSteps starts a new session after that many steps of one (0: never).
	sessionSteps int
	// warmSteps makes the warm-up last until that many steps were answered.
	warmSteps int
	prefix    string
	// pid, when set, is the server's process: its CPU time while measuring is reported per
	// request, which the machine's other load does not change as it does throughput.
	pid int
}

// of is the traffic sent to the server running as process pid (0: unknown).
func (t traffic) of(pid int) traffic { t.pid = pid; return t }

// drive runs c agents in a closed loop against url: each sends a step, waits for the
// answer, and sends the next.
func drive(url string, c int, warmup, dur time.Duration, load traffic) (result, error) {
	rs, err := driveEach([]string{url}, []traffic{load}, c, warmup, dur, 0)
	if err != nil {
		return result{}, err
	}
	return rs[0], nil
}

// driveEach runs c agents in a closed loop against each of urls in turn, slice by slice
// (slice 0: only one url), and returns each url's result. Interleaving two servers in
// short slices measures them under the same state of the machine: run one after the
// other, a few seconds apart, they meet a different one (another tenant's burst, a
// frequency step), which moved one agent's p50 ratio by ±20 % from round to round.
func driveEach(urls []string, loads []traffic, c int, warmup, dur, slice time.Duration) ([]result, error) {
	n := len(urls)
	// conns[t][a] is agent a's connection to target t. Several replicas of one target
	// (comma-separated): agent a sends to the a-th, round-robin.
	conns := make([][]*agentConn, n)
	for t, url := range urls {
		replicas := strings.Split(url, ",")
		conns[t] = make([]*agentConn, c)
		for a := range c {
			conn, err := newAgentConn(replicas[a%len(replicas)])
			if err != nil {
				return nil, err
			}
			conns[t][a] = conn
		}
	}

	// active is the target the agents send to; a step is counted for the target it was
	// sent to, even when the slice ends while it is answered.
	var active atomic.Int32
	var measuring atomic.Bool
	var stop atomic.Bool
	errs := make([]atomic.Int64, n)
	lat := make([][][]time.Duration, n) // [target][agent]
	for t := range lat {
		lat[t] = make([][]time.Duration, c)
	}
	var wg sync.WaitGroup
	var firstErr atomic.Value
	var answered atomic.Int64
	run := time.Now().UnixNano()
	for a := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				for t := range conns {
					conns[t][a].close()
				}
			}()
			var body []byte
			// share: the sessions this agent sends to, round-robin (a, a+c, a+2c, …).
			share := 1
			if n := loads[0].sessions; n > 0 {
				share = max(1, (n-a+c-1)/c)
			}
			next := make([]int, n) // each target's own step counter: its sessions advance alike
			for !stop.Load() {
				t := int(active.Load())
				load := loads[t]
				i := next[t]
				next[t]++
				k := i % share
				step := i / share
				var session string
				switch {
				case load.sessions > 0:
					session = fmt.Sprintf("load-%s%d", load.prefix, a+k*c)
				default:
					session = fmt.Sprintf("load-%d-%d", run, a)
				}
				if load.sessionSteps > 0 {
					session += fmt.Sprintf("-%d", step/load.sessionSteps)
				}
				body = stepBody(body[:0], session, step)
				t0 := time.Now()
				err := conns[t][a].post(body)
				d := time.Since(t0)
				answered.Add(1)
				if !measuring.Load() {
					continue
				}
				if err != nil {
					errs[t].Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				lat[t][a] = append(lat[t][a], d)
			}
		}()
	}
	// The clock below switches the agents to the next target every slice, starts and ends
	// the measurement, and adds the measured time of each slice to its target: a step
	// sent just before a switch is answered in the next slice, but the time is the
	// slice's, and the step the target's it was sent to.
	spent := make([]time.Duration, n)
	begin, end, ended := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		var tick <-chan time.Time
		if n > 1 && slice > 0 {
			t := time.NewTicker(slice)
			defer t.Stop()
			tick = t.C
		}
		var from time.Time
		for {
			select {
			case <-begin:
				from = time.Now()
				measuring.Store(true)
			case <-end:
				measuring.Store(false)
				spent[active.Load()] += time.Since(from)
				return
			case now := <-tick:
				if measuring.Load() {
					spent[active.Load()] += now.Sub(from)
				}
				active.Store((active.Load() + 1) % int32(n))
				from = now
			}
		}
	}()
	time.Sleep(warmup) // the warm-up is a duration by definition
	for answered.Load() < int64(loads[0].warmSteps) {
		time.Sleep(50 * time.Millisecond) // polling a counter the agents advance
	}
	cpu0, wrote0 := make([]time.Duration, n), make([]int64, n)
	for t := range n {
		cpu0[t], wrote0[t] = procCPU(loads[t].pid), procWritten(loads[t].pid)
	}
	begin <- struct{}{}
	// With slices each target is measured for about dur: the run lasts n times as long.
	if n > 1 && slice > 0 {
		time.Sleep(time.Duration(n) * dur)
	} else {
		time.Sleep(dur)
	}
	close(end)
	<-ended
	cpu1, wrote1 := make([]time.Duration, n), make([]int64, n)
	for t := range n {
		cpu1[t], wrote1[t] = procCPU(loads[t].pid), procWritten(loads[t].pid)
	}
	stop.Store(true)
	wg.Wait()

	out := make([]result, n)
	for t := range n {
		var all []time.Duration
		for _, l := range lat[t] {
			all = append(all, l...)
		}
		if len(all) == 0 {
			if e, ok := firstErr.Load().(error); ok {
				return nil, e
			}
			return nil, fmt.Errorf("no request to %s completed", urls[t])
		}
		slices.Sort(all)
		r := result{rps: float64(len(all)) / spent[t].Seconds(), errors: errs[t].Load(), lat: all}
		if cpu0[t] > 0 && cpu1[t] > cpu0[t] {
			r.cpu = (cpu1[t] - cpu0[t]) / time.Duration(len(all))
		}
		if wrote0[t] > 0 && wrote1[t] > wrote0[t] {
			r.wrote = float64(wrote1[t]-wrote0[t]) / float64(len(all))
		}
		r.p50, r.p90, r.p99 = pct(all, 0.50), pct(all, 0.90), pct(all, 0.99)
		out[t] = r
	}
	return out, nil
}

// procCPU is the user and system CPU time process pid has used, 0 when unknown (no pid, or
// no /proc). Linux counts it in ticks of 10 ms (USER_HZ 100).
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// procWritten is the bytes process pid has written (wchar: files, the journal and SQLite's
// included, and sockets), 0 when unknown.
func procWritten(pid int) int64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0
			}
			return n
		}
	}
	return 0
}

// pct is the p-quantile of sorted latencies.
func pct(sorted []time.Duration, p float64) time.Duration {
	return sorted[int(p*float64(len(sorted)-1))]
}

// combine merges rounds: the median round's req/s, percentiles over every request.
func combine(rs []result) result {
	var out result
	var rps, cpu, wrote []float64
	for _, r := range rs {
		rps = append(rps, r.rps)
		cpu = append(cpu, float64(r.cpu))
		wrote = append(wrote, r.wrote)
		out.lat = append(out.lat, r.lat...)
		out.errors += r.errors
	}
	slices.Sort(out.lat)
	out.rps = median(rps)
	out.cpu = time.Duration(median(cpu))
	out.wrote = median(wrote)
	out.p50, out.p90, out.p99 = pct(out.lat, 0.50), pct(out.lat, 0.90), pct(out.lat, 0.99)
	return out
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// stepBody is a realistic steps/toolCallRequest (about 1.5 KB) from agent session s,
// appended to b. It is built by appends rather than fmt: the load generator shares the
// server's cores, and formatting the template took a few microseconds per request.
func stepBody(b []byte, session string, i int) []byte {
	tools := [...]string{"search_web", "read_file", "send_email", "transfer_funds"}
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, `,"method":"steps/toolCallRequest","params":{
"context":{"agent":{"id":"agent-billing","name":"Billing assistant","instructions":"You help customers of corp.example with invoices, refunds and account questions. Never disclose other customers' data. Escalate disputes over 1000 EUR to a human.","version":"2.3.1","provider":{"name":"corp.example","url":"https://corp.example"},"model":{"id":"model-large","name":"Large model","provider":{"name":"model-co"}},
"tools":[{"id":"search_web","name":"search_web","type":"function_call","arguments":[{"name":"query","type":"string","required":true}],"outputs":null},{"id":"send_email","name":"send_email","type":"function_call","arguments":[{"name":"to","type":"string","required":true},{"name":"body","type":"string","required":true}],"outputs":null}]},
"session":{"id":"`...)
	b = append(b, session...)
	b = append(b, `"},"turnId":"turn-`...)
	b = strconv.AppendInt(b, int64(i/4), 10)
	b = append(b, `","stepId":"step-`...)
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, `","timestamp":"2026-11-22T08:00:00Z",
"user":{"id":"user-42","name":"Dana","email":"dana@corp.example","organization":{"id":"org-1","name":"Corp"}}},
"toolCallRequest":{"executionId":"exec-`...)
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, `","toolId":"`...)
	b = append(b, tools[i%len(tools)]...)
	b = append(b, `","inputs":[{"name":"query","value":"outstanding invoices for customer 8812 in October"},{"name":"to","value":"dana@corp.example"},{"name":"amount","value":`...)
	b = strconv.AppendInt(b, int64((i*37)%2000), 10)
	b = append(b, `}]},
"reasoning":"The user asked about their open invoices; I will look them up before answering."}}`...)
	return b
}

// startOPA starts the bench/opa server (OPA with four Rego rules) and returns its URL.
func startOPA(ctx context.Context, bin string) (string, int, func(), error) {
	port, err := freePort()
	if err != nil {
		return "", 0, nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.CommandContext(ctx, bin, addr)
	cmd.Stderr = os.Stderr
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return "", 0, nil, fmt.Errorf("start %s: %w", bin, err)
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	if err := waitReady("http://"+addr+"/ready", 20*time.Second); err != nil {
		stop()
		return "", 0, nil, fmt.Errorf("OPA server: %w", err)
	}
	return "http://" + addr + "/aos", cmd.Process.Pid, stop, nil
}

// startNoop starts this program again as the no-op floor server and returns its URL.
func startNoop(ctx context.Context) (string, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, fmt.Errorf("find own executable: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.CommandContext(ctx, self, "noop-server", addr)
	cmd.Stderr = os.Stderr
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start floor server: %w", err)
	}
	url := "http://" + addr + "/aos"
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	if err := waitReady("http://"+addr+"/ready", 10*time.Second); err != nil {
		stop()
		return "", nil, fmt.Errorf("floor server: %w", err)
	}
	return url, stop, nil
}

// startVigil starts `vigil serve` on a temporary database and returns its URL and process id.
func startVigil(ctx context.Context, bin, rules string) (string, int, func(), error) {
	dir, err := os.MkdirTemp("", "vigil-loadgen-")
	if err != nil {
		return "", 0, nil, fmt.Errorf("temp dir: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return "", 0, nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"serve", "--addr", addr, "--db", filepath.Join(dir, "vigil.db"), "--log-level", "warn"}
	if rules != "" {
		args = append(args, "--rules", rules)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = os.Stderr
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", 0, nil, fmt.Errorf("start %s: %w", bin, err)
	}
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}
	if err := waitReady("http://"+addr+"/api/info", 20*time.Second); err != nil {
		stop()
		return "", 0, nil, fmt.Errorf("vigil: %w", err)
	}
	return "http://" + addr + "/aos", cmd.Process.Pid, stop, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitReady(url string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready at %s after %s", url, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serveNoop is the floor: decode the JSON-RPC request and answer allow, nothing else.
func serveNoop(addr string) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/ready", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/aos", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"decision":"allow","message":"ok"}}`, req.ID)
	})
	return (&http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}).ListenAndServe()
}
