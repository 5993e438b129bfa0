package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/vigil-guardian/vigil/guardian/ruleenv"
	"github.com/vigil-guardian/vigil/rules"
)

// runRules implements `vigil rules check FILE...` and `vigil rules test FILE...`, so teams
// can check their policy in their own CI.
func runRules(args []string, stdout, stderr io.Writer) int {
	const rulesUsage = `usage: vigil rules check FILE...   compile rules files; exit 1 on any error
       vigil rules test FILE...    run the test cases in rules files; exit 1 on any failure
`
	if len(args) > 0 && isHelp(args[len(args)-1]) {
		fmt.Fprint(stdout, rulesUsage)
		return 0
	}
	if len(args) < 2 || (args[0] != "check" && args[0] != "test") {
		fmt.Fprint(stderr, rulesUsage)
		return 2
	}
	sub, files := args[0], args[1:]
	failed := false
	passed, failedTests := 0, 0
	for _, name := range files {
		f, prog, err := loadRulesFile(name)
		if err != nil {
			printRulesError(stderr, name, err)
			failed = true
			continue
		}
		if sub == "check" {
			fmt.Fprintf(stdout, "%s: %d rules OK\n", name, len(f.Rules))
			continue
		}
		if len(f.Tests) == 0 {
			fmt.Fprintf(stdout, "%s: no tests\n", name)
			continue
		}
		for _, r := range rules.RunTests(f, prog, ruleenv.FromMethodParams) {
			if r.Passed {
				passed++
				fmt.Fprintf(stdout, "ok    %s: %s\n", name, r.Name)
				continue
			}
			failedTests++
			loc := name
			if r.Line > 0 {
				loc = fmt.Sprintf("%s:%d", name, r.Line)
			}
			fmt.Fprintf(stdout, "FAIL  %s: %s: %s\n", loc, r.Name, r.Message)
		}
	}
	if sub == "test" {
		fmt.Fprintf(stdout, "%d passed, %d failed\n", passed, failedTests)
	}
	if failed || failedTests > 0 {
		return 1
	}
	return 0
}

func loadRulesFile(name string) (*rules.File, *rules.Program, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, nil, err
	}
	f, err := rules.ParseFile(name, data)
	if err != nil {
		return nil, nil, err
	}
	prog, err := rules.CompileFile(f, rules.Options{})
	if err != nil {
		return nil, nil, err
	}
	return f, prog, nil
}

// printRulesError prints one line per problem, each starting with file:line:column.
func printRulesError(w io.Writer, name string, err error) {
	var ce rules.CompileErrors
	if errors.As(err, &ce) {
		for _, d := range ce {
			fmt.Fprintln(w, d.String())
		}
		return
	}
	fmt.Fprintln(w, err.Error())
}
