package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// markdownPages are the README and the pages under docs/.
func markdownPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join("docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, pages)
	return append([]string{"README.md"}, pages...)
}

var (
	mdHeading  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	mdCodeSpan = regexp.MustCompile("`+[^`]*`+")
	// An inline link or image: [text](target) or [text](target "title"). Link texts may hold
	// code spans (removed before matching) but no brackets.
	mdLink = regexp.MustCompile(`\[[^\[\]]*\]\(\s*<?([^()\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
)

// mdLines returns the lines of a Markdown file that are not inside fenced code blocks, with
// their line numbers.
func mdLines(t *testing.T, path string) (lines []string, numbers []int) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	inFence := false
	for i, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if !inFence {
			lines = append(lines, line)
			numbers = append(numbers, i+1)
		}
	}
	return lines, numbers
}

// githubAnchor is the id GitHub gives a heading: its text lower-cased, without Markdown
// punctuation and anything but letters, digits, spaces, hyphens and underscores, spaces made
// hyphens.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// mdAnchors returns the anchors of a Markdown file's headings; a repeated heading gets -1,
// -2… as on GitHub.
func mdAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	lines, _ := mdLines(t, path)
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range lines {
		m := mdHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := githubAnchor(m[2])
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

func TestGithubAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Live stream (`GET /api/live`)":                  "live-stream-get-apilive",
		"Holds: human review of held steps":              "holds-human-review-of-held-steps",
		"Go API (for the guardian, storage and the CLI)": "go-api-for-the-guardian-storage-and-the-cli",
		"No display?": "no-display",
		"Numbers (2-core machine, SQLite file, no -race)": "numbers-2-core-machine-sqlite-file-no--race",
		"modify": "modify",
	} {
		require.Equal(t, want, githubAnchor(heading), heading)
	}
}

// TestDocLinks: every relative link and #anchor in the README and docs/*.md points at a file
// that exists and, for an anchor, at a heading of that file.
func TestDocLinks(t *testing.T) {
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if anchors[path] == nil {
			anchors[path] = mdAnchors(t, path)
		}
		return anchors[path]
	}
	checked := 0
	var broken []string
	for _, page := range markdownPages(t) {
		lines, numbers := mdLines(t, page)
		for i := range lines {
			lines[i] = mdCodeSpan.ReplaceAllString(lines[i], "code")
		}
		// Matched over the whole text, so that a link whose text wraps to the next line counts.
		text := strings.Join(lines, "\n")
		for _, loc := range mdLink.FindAllStringSubmatchIndex(text, -1) {
			target := text[loc[2]:loc[3]]
			u, err := url.Parse(target)
			if err != nil || u.Scheme != "" || strings.HasPrefix(target, "//") {
				continue // an external link (or not a URL at all)
			}
			where := fmt.Sprintf("%s:%d: %s", page, numbers[strings.Count(text[:loc[2]], "\n")], target)
			dest := page
			if u.Path != "" {
				dest = filepath.Join(filepath.Dir(page), filepath.FromSlash(u.Path))
				if _, err := os.Stat(dest); err != nil {
					broken = append(broken, where+": no such file")
					continue
				}
			}
			switch {
			case u.Fragment == "":
			case !strings.HasSuffix(dest, ".md"):
				broken = append(broken, where+": an anchor into a file that is not Markdown")
			case !anchorsOf(dest)[u.Fragment]:
				broken = append(broken, fmt.Sprintf("%s: %s has no heading #%s", where, dest, u.Fragment))
			}
			checked++
		}
	}
	require.Empty(t, broken, "broken links:\n%s", strings.Join(broken, "\n"))
	require.Greater(t, checked, 50, "links checked")
}
