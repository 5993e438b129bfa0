package rules

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docFiles are the Markdown files whose rules examples must stay true: the README and every
// page under docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, pages, "no docs/*.md pages found")
	return append([]string{filepath.Join("..", "README.md")}, pages...)
}

// docExample is one rules example found in a Markdown file.
type docExample struct {
	where string // file:line
	src   string
}

var (
	codeSpan = regexp.MustCompile("`([^`]+)`")
	whenLine = regexp.MustCompile(`(?m)^\s*(- )?when:`)
	rulesKey = regexp.MustCompile(`(?m)^rules:`)
)

// scanDocExamples reads a Markdown file and returns the expressions in the Example column of
// its tables and the YAML code blocks that hold rules (a `when:` line).
func scanDocExamples(t *testing.T, path string) (exprs, yamlRules []docExample) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var (
		line       int
		fence      string // the opening fence's info string while inside a code block
		inFence    bool
		block      []string
		blockStart int
		exampleCol = -1 // the Example column of the current table, or -1
	)
	for sc.Scan() {
		line++
		text := sc.Text()
		trimmed := strings.TrimSpace(text)
		if strings.HasPrefix(trimmed, "```") {
			if !inFence {
				inFence, fence, block, blockStart = true, strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), nil, line+1
				continue
			}
			inFence = false
			src := strings.Join(block, "\n")
			if (fence == "yaml" || fence == "yml") && whenLine.MatchString(src) {
				yamlRules = append(yamlRules, docExample{where: path + ":" + strconv.Itoa(blockStart), src: src})
			}
			continue
		}
		if inFence {
			block = append(block, text)
			continue
		}
		if !strings.HasPrefix(trimmed, "|") {
			exampleCol = -1
			continue
		}
		cells := splitRow(trimmed)
		if exampleCol < 0 {
			for i, c := range cells {
				if c == "Example" {
					exampleCol = i
				}
			}
			continue
		}
		if exampleCol >= len(cells) || strings.Trim(cells[exampleCol], "-: ") == "" {
			continue // the delimiter row, or no example in this row
		}
		if m := codeSpan.FindStringSubmatch(cells[exampleCol]); m != nil {
			exprs = append(exprs, docExample{where: path + ":" + strconv.Itoa(line), src: m[1]})
		}
	}
	require.NoError(t, sc.Err())
	return exprs, yamlRules
}

// splitRow splits a Markdown table row into its trimmed cells; `\|` is a literal bar.
func splitRow(row string) []string {
	row = strings.TrimSuffix(strings.TrimPrefix(row, "|"), "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(row); i++ {
		switch {
		case row[i] == '\\' && i+1 < len(row) && row[i+1] == '|':
			cur.WriteByte('|')
			i++
		case row[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(row[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

// TestDocumentedExamples: every expression in the Example column of the docs' tables (the
// environment and the helpers) compiles and runs, and every YAML rules example compiles.
func TestDocumentedExamples(t *testing.T) {
	var exprs, yamlRules []docExample
	for _, path := range docFiles(t) {
		e, y := scanDocExamples(t, path)
		exprs = append(exprs, e...)
		yamlRules = append(yamlRules, y...)
	}

	found := map[string]bool{}
	for _, ex := range exprs {
		found[ex.src] = true
		t.Run(ex.where, func(t *testing.T) {
			_, err := run(t, ex.src, historyEnv())
			require.NoError(t, err, ex.src)
		})
	}
	// The scan must keep finding the tables: a few examples from each of them.
	for _, src := range []string{
		`method == "steps/toolCallRequest"`,
		`any(session.steps, .decision == "deny")`,
		`kind == "knowledge" && params.knowledgeStep.query contains "salary"`,
		`now.Hour() >= 22`,
		`all(emails(text), # endsWith "@corp.example")`,
		`regexMatch(inputs.cmd, "rm\\s+-rf")`,
		`sessionText(session) contains "CONFIDENTIAL"`,
	} {
		require.True(t, found[src], "the docs' tables no longer show %s", src)
	}
	require.GreaterOrEqual(t, len(exprs), 37)

	for _, ex := range yamlRules {
		t.Run(ex.where, func(t *testing.T) {
			src := ex.src
			if !rulesKey.MatchString(src) {
				// A bare list of rules, or one rule: make it a rules file.
				if !strings.HasPrefix(strings.TrimSpace(src), "-") {
					src = "- " + strings.ReplaceAll(strings.TrimSpace(src), "\n", "\n  ")
				}
				src = "rules:\n  " + strings.ReplaceAll(strings.TrimSpace(src), "\n", "\n  ")
			}
			f, err := ParseFile("example.yaml", []byte(src))
			require.NoError(t, err, src)
			require.NotEmpty(t, f.Rules)
			_, err = CompileFile(f, Options{})
			require.NoError(t, err, src)
		})
	}
	require.GreaterOrEqual(t, len(yamlRules), 4, "the YAML rules examples in the docs")
}
