package sluice_test

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDocLinks: every relative link of README.md and docs/*.md leads to a
// file of the repository and, with a #fragment into a Markdown file, to a
// heading of that file, as GitHub renders it.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	pages, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	pages = append([]string{"README.md"}, pages...)
	require.Greater(t, len(pages), 1, "no docs/*.md found")
	anchors := anchorCache{}
	for _, page := range pages {
		t.Run(page, func(t *testing.T) {
			// Not parallel: the subtests share the cache of anchors.
			src, err := os.ReadFile(page)
			require.NoError(t, err)
			links := markdownLinks(string(src))
			for _, l := range links {
				if problem := anchors.check(page, l.target); problem != "" {
					t.Errorf("%s:%d: dead link %q: %s", page, l.line, l.target, problem)
				}
			}
		})
	}
}

// TestGitHubAnchor: the fragment a heading gets is GitHub's.
func TestGitHubAnchor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ heading, want string }{
		{"Who the client is", "who-the-client-is"},
		{"In one minute: put it in front of HTTP", "in-one-minute-put-it-in-front-of-http"},
		{"Keys without an entry", "keys-without-an-entry"},
		{"Local state (`localcache`)", "local-state-localcache"},
		{"(a) The algorithm's own error", "a-the-algorithms-own-error"},
		{"Each algorithm in real windows: sliding, weighted, fixed", "each-algorithm-in-real-windows-sliding-weighted-fixed"},
		{"The buckets, Eventual: token bucket, GCRA", "the-buckets-eventual-token-bucket-gcra"},
		{"A [linked](other.md) heading", "a-linked-heading"},
		{"snake_case and N̂ stay", "snake_case-and-n̂-stay"},
		{"Wait: the leaky bucket as a queue", "wait-the-leaky-bucket-as-a-queue"},
	} {
		assert.Equal(t, tc.want, githubAnchor(tc.heading), "heading %q", tc.heading)
	}
	// Repeated headings get -1, -2 ...
	got := headingAnchors("# A\n## A\n```\n# not a heading\n```\n### A\n")
	assert.Equal(t, map[string]bool{"a": true, "a-1": true, "a-2": true}, got)
}

// TestMarkdownLinks: links in code are not links; inline and reference
// links are.
func TestMarkdownLinks(t *testing.T) {
	t.Parallel()
	src := "See [a](a.md) and [`b`](b.md#x \"title\").\n" +
		"`[not](code.md)`\n```\n[not](block.md)\n```\n\n[ref]: c.md\n\nA sentence wraps\n[1, 2]: 3 here\n"
	var got []string
	for _, l := range markdownLinks(src) {
		got = append(got, fmt.Sprintf("%d:%s", l.line, l.target))
	}
	assert.Equal(t, []string{"1:a.md", "1:b.md#x", "7:c.md"}, got)
}

type docLink struct {
	line   int
	target string
}

var (
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	refLink    = regexp.MustCompile(`^\s*\[[^\]]+\]:\s+(\S+)`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
)

// markdownLinks lists the link targets of a Markdown text, outside fenced
// code blocks and code spans.
func markdownLinks(src string) []docLink {
	var links []docLink
	fenced := false
	// A reference definition starts a paragraph (or follows another one):
	// "[1024, 2²²]: 2 MiB" inside a wrapped sentence is text.
	paragraphStart := true
	sc := bufio.NewScanner(strings.NewReader(src))
	sc.Buffer(make([]byte, 0, 1<<16), 1<<22)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		startsParagraph := paragraphStart
		paragraphStart = strings.TrimSpace(line) == ""
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			links = append(links, docLink{n, m[1]})
		}
		if m := refLink.FindStringSubmatch(line); m != nil && startsParagraph {
			links = append(links, docLink{n, m[1]})
			paragraphStart = true
		}
	}
	return links
}

// anchorCache holds the heading anchors of the Markdown files read so far.
type anchorCache map[string]map[string]bool

// check says what is wrong with a link from page, or "" if nothing is.
func (c anchorCache) check(page, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return "" // not relative
	}
	file, frag, _ := strings.Cut(target, "#")
	resolved := page
	if file != "" {
		resolved = path.Join(path.Dir(page), file)
		if strings.HasPrefix(resolved, "..") {
			return "points outside the repository"
		}
		if _, err := os.Stat(resolved); err != nil {
			return fmt.Sprintf("no file %s", resolved)
		}
	}
	if frag == "" || !strings.HasSuffix(resolved, ".md") {
		return ""
	}
	anchors, ok := c[resolved]
	if !ok {
		src, err := os.ReadFile(resolved)
		if err != nil {
			return err.Error()
		}
		anchors = headingAnchors(string(src))
		c[resolved] = anchors
	}
	if !anchors[strings.ToLower(frag)] {
		return fmt.Sprintf("no heading #%s in %s", frag, resolved)
	}
	return ""
}

var (
	headingLine = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlAnchor  = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	linkInText  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// headingAnchors returns the fragments GitHub gives the headings of a
// Markdown text (repeated ones numbered -1, -2 ...), and those of HTML
// anchors.
func headingAnchors(src string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(src, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		m := headingLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := githubAnchor(m[1])
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// githubAnchor is the fragment GitHub derives from a heading's text:
// lowercased, links reduced to their text, every character other than a
// letter, digit, space, '-' or '_' dropped, spaces turned into '-'.
func githubAnchor(heading string) string {
	heading = linkInText.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
