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

// docPages are the pages the documentation tests read: README.md and
// docs/*.md.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	require.NotEmpty(t, pages, "no docs/*.md found")
	return append([]string{"README.md"}, pages...)
}

// The markers a script writes around what it generated: a table of
// measurements, the date and machine of a run.
var (
	generatedBegin = regexp.MustCompile(`^<!-- generated by (\S+): begin -->$`)
	generatedEnd   = regexp.MustCompile(`^<!-- generated by (\S+): end -->$`)
)

// docLine is a line of a Markdown page with what surrounds it.
type docLine struct {
	n         int
	text      string
	fenced    bool // in a fenced code block, or a fence
	generated bool // between generated markers, or a marker
}

// docLines splits a page into lines, marking those in code blocks and in
// generated blocks; a generated block that does not end, ends twice or
// names no script in the repository is an error.
func docLines(src string) ([]docLine, error) {
	var lines []docLine
	fenced := false
	script := "" // the script whose block is open
	for i, text := range strings.Split(src, "\n") {
		l := docLine{n: i + 1, text: text, fenced: fenced, generated: script != ""}
		trimmed := strings.TrimSpace(text)
		switch {
		case strings.HasPrefix(trimmed, "```"):
			fenced = !fenced
			l.fenced = true
		case fenced:
		case generatedBegin.MatchString(trimmed):
			s := generatedBegin.FindStringSubmatch(trimmed)[1]
			if script != "" {
				return nil, fmt.Errorf("line %d: a block generated by %s begins inside one by %s", l.n, s, script)
			}
			if _, err := os.Stat(s); err != nil {
				return nil, fmt.Errorf("line %d: no script %s", l.n, s)
			}
			script = s
			l.generated = true
		case generatedEnd.MatchString(trimmed):
			s := generatedEnd.FindStringSubmatch(trimmed)[1]
			if s != script {
				return nil, fmt.Errorf("line %d: the end of a block generated by %s, in %q", l.n, s, script)
			}
			script = ""
		}
		lines = append(lines, l)
	}
	if script != "" {
		return nil, fmt.Errorf("the block generated by %s does not end", script)
	}
	return lines, nil
}

// A figure with a unit: a time, a share, a rate, a speed-up, a size.
var (
	figure = regexp.MustCompile(`(^|[^\p{L}\p{N}_.·/])(~|≈|\+)?(\d+(?:[.,]\d+)*)\s?` +
		`(ns/op|B/op|allocs/op|ns|µs|ms|s|%|[kM]?\s?(?:checks|ops|requests|calls)/s|[kKMG]i?B|×)` +
		`($|[^\p{L}\p{N}_/])`)
	runCount = regexp.MustCompile(`\b\d+ (?:of (?:the )?\d+ )?runs\b`)
)

// bareFigures lists the figures of a line of prose that read as
// measurements rather than parameters or examples: a time, share or rate
// with three significant digits or more (parameters are round: 100 ms,
// ε = 1 %, 2000 checks/s), nanoseconds and microseconds other than a bound
// (≤ 50µs), an approximate figure (~2 µs), a fractional speed-up (3.2×),
// figures per op, thousands or millions per second, and a count of runs.
func bareFigures(line string) []string {
	return bareFiguresAfter("", line)
}

// bareFiguresAfter is bareFigures of a line that follows prev in its
// paragraph: "≤" at the end of prev bounds a figure that opens line.
func bareFiguresAfter(prev, line string) []string {
	var found []string
	for _, m := range figure.FindAllStringSubmatchIndex(line, -1) {
		start, sign := m[6], ""
		if m[4] >= 0 {
			start, sign = m[4], line[m[4]:m[5]]
		}
		number, unit := line[m[6]:m[7]], line[m[8]:m[9]]
		if measured(sign, number, unit, strings.TrimSpace(prev+" "+line[:start])) {
			found = append(found, line[start:m[9]])
		}
	}
	return append(found, runCount.FindAllString(line, -1)...)
}

// measured says whether a number with its unit, the sign before it and the
// text before it (which may end in a bound such as "≤") reads as a
// measurement; bareFigures lists the cases.
func measured(sign, number, unit, before string) bool {
	bound := strings.HasSuffix(before, "≤") || strings.HasSuffix(before, "<") ||
		strings.HasSuffix(before, "≥") || strings.HasSuffix(before, ">")
	digits := strings.NewReplacer(",", "", ".", "").Replace(number)
	digits = strings.TrimLeft(digits, "0")
	if !strings.ContainsAny(number, ".,") {
		digits = strings.TrimRight(digits, "0")
	}
	switch {
	case sign != "":
		return true
	case unit == "×":
		return strings.Contains(number, ".")
	case strings.HasSuffix(unit, "/op"):
		return true
	case strings.HasSuffix(unit, "/s") && (strings.HasPrefix(unit, "k") || strings.HasPrefix(unit, "M")):
		return true
	case unit == "ns" || unit == "µs":
		return !bound
	case strings.HasSuffix(unit, "B"):
		return false
	case unit == "s" && !strings.ContainsAny(number, ".,"):
		return false // whole seconds: a worked example's clock, a window
	}
	return len(digits) >= 3 && !bound
}

// TestDocsFigures: every measurement in the documentation sits in a block a
// script generated (and says so with its markers), so that it can be
// regenerated; prose and hand-written tables hold no bare measurement.
func TestDocsFigures(t *testing.T) {
	t.Parallel()
	for _, page := range docPages(t) {
		src, err := os.ReadFile(page)
		require.NoError(t, err)
		lines, err := docLines(string(src))
		require.NoError(t, err, page)
		prev := ""
		for _, l := range lines {
			if l.fenced || l.generated {
				prev = ""
				continue
			}
			text := codeSpan.ReplaceAllString(l.text, "")
			text = inlineLink.ReplaceAllString(text, "]")
			figures := bareFiguresAfter(prev, text)
			prev = text
			for _, f := range figures {
				t.Errorf("%s:%d: %q reads as a measurement: generate it (between a script's markers) or drop it", page, l.n, f)
			}
		}
	}
}

// maxSentenceWords is the longest sentence the documentation may hold.
const maxSentenceWords = 45

// longSentencesLeft counts, per page, the sentences over maxSentenceWords
// that the page still holds: pages not yet rewritten. A page may hold no
// more; once it holds fewer, its count here must come down with it, so that
// the count only falls.
var longSentencesLeft = map[string]int{}

// TestDocsSentences: no sentence of the prose of README.md and docs/*.md
// (code blocks, tables, headings and generated blocks aside) runs over
// maxSentenceWords words, but for the pages of longSentencesLeft.
func TestDocsSentences(t *testing.T) {
	t.Parallel()
	for _, page := range docPages(t) {
		src, err := os.ReadFile(page)
		require.NoError(t, err)
		lines, err := docLines(string(src))
		require.NoError(t, err, page)
		var long []string
		for _, s := range sentences(lines) {
			if n := len(strings.Fields(s.text)); n > maxSentenceWords {
				long = append(long, fmt.Sprintf("%s:%d: a sentence of %d words (at most %d): %.100q…", page, s.line, n, maxSentenceWords, s.text))
			}
		}
		switch left := longSentencesLeft[page]; {
		case len(long) > left:
			for _, l := range long {
				t.Error(l)
			}
		case len(long) < left:
			t.Errorf("%s holds %d sentences over %d words: lower longSentencesLeft[%q] from %d to %d", page, len(long), maxSentenceWords, page, left, len(long))
		}
	}
}

// TestSentences: prose is cut into sentences at a full stop, a question or
// an exclamation mark; abbreviations, decimals, code and link targets do not
// end one, and list items, table rows and code do not run into the prose.
func TestSentences(t *testing.T) {
	t.Parallel()
	src := "# Head. Line\nOne two, e.g. three. Four\nfive 1.5 `a. b` [six](x.md#y.z)?\n" +
		"- item one\n- item two. Three\n\n| a. b | c |\n```\ncode. code\n```\nlast"
	lines, err := docLines(src)
	require.NoError(t, err)
	var got []string
	for _, s := range sentences(lines) {
		got = append(got, fmt.Sprintf("%d:%s", s.line, s.text))
	}
	assert.Equal(t, []string{"2:One two, e.g. three.", "2:Four five 1.5 x six?", "4:item one", "5:item two.", "5:Three", "11:last"}, got)
}

type sentence struct {
	line int
	text string
}

var (
	sentenceEnd  = regexp.MustCompile(`[.?!]["')\]*_]*(?:\s|$)`)
	abbreviation = regexp.MustCompile(`\b(?:e\.g|i\.e|etc|vs|cf|approx|resp|no)\.["')\]]*\s?$`)
	listItem     = regexp.MustCompile(`^\s*(?:[-*+]|\d+[.)])\s+`)
	htmlComment  = regexp.MustCompile(`<!--.*?-->`)
)

// sentences cuts the prose of a page into sentences, each with the line it
// begins on.
func sentences(lines []docLine) []sentence {
	var out []sentence
	var cur strings.Builder
	start := 0
	flush := func() {
		if text := strings.TrimSpace(cur.String()); text != "" {
			out = append(out, sentence{start, text})
		}
		cur.Reset()
	}
	for _, l := range lines {
		text := strings.TrimSpace(l.text)
		if l.fenced || l.generated || text == "" || strings.HasPrefix(text, "#") ||
			strings.HasPrefix(text, "|") || strings.HasPrefix(l.text, "    ") || strings.HasPrefix(text, "<") {
			flush()
			continue
		}
		if listItem.MatchString(l.text) {
			flush()
			text = listItem.ReplaceAllString(l.text, "")
		}
		text = strings.TrimPrefix(text, "> ")
		text = htmlComment.ReplaceAllString(text, "")
		text = codeSpan.ReplaceAllString(text, "x")
		text = inlineLink.ReplaceAllString(text, "]")
		text = strings.NewReplacer("[", "", "]", "").Replace(text)
		for text != "" {
			if cur.Len() == 0 {
				start = l.n
			} else {
				cur.WriteByte(' ')
			}
			loc := sentenceEnd.FindStringIndex(text)
			for loc != nil && abbreviation.MatchString(text[:loc[1]]) {
				next := sentenceEnd.FindStringIndex(text[loc[1]:])
				if next == nil {
					loc = nil
					break
				}
				loc = []int{loc[1] + next[0], loc[1] + next[1]}
			}
			if loc == nil {
				cur.WriteString(text)
				break
			}
			cur.WriteString(strings.TrimSpace(text[:loc[1]]))
			flush()
			text = strings.TrimSpace(text[loc[1]:])
		}
	}
	flush()
	return out
}

// TestBareFigures: a measurement pasted into prose is caught; parameters,
// bounds and examples are not.
func TestBareFigures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"A check took 26.1 ns on the hot key.", []string{"26.1 ns"}},
		{"the p99 was 573 µs and the p99.9 3.21 ms", []string{"573 µs", "3.21 ms"}},
		{"over-admission stayed at 0.600 % (ε = 1 %)", []string{"0.600 %"}},
		{"sluice was 2.68× faster, at ~2 ms", []string{"2.68×", "~2 ms"}},
		{"it reached 50.4M checks/s, 14 B/op", []string{"50.4M checks/s", "14 B/op"}},
		{"it failed in 3 of 10 runs, and held in 40 runs", []string{"3 of 10 runs", "40 runs"}},
		{"utilization 80.2%", []string{"80.2%"}},
		{"sync every 100 ms with ε = 1 %, a 50 ms timeout, 0.9·L", nil},
		{"the target is p99.9 ≤ 50 µs; a 1 s window of 10 sub-windows", nil},
		{"2000 checks/s per instance, 400/1s, B = 10, 2 KiB", nil},
		{"at 132 s the client asks again", nil},
	} {
		assert.Equal(t, tc.want, bareFigures(tc.line), "%q", tc.line)
	}
}

// maxPageBytes bounds a page of the manual: a longer one holds a lab
// notebook or raw measurements, which belong in benchmarks/HISTORY.md or in
// the results files the scripts write outside docs/.
const maxPageBytes = 40 << 10

// maxDocsBytes bounds the manual, docs/*.md together: what a user reads.
const maxDocsBytes = 200 << 10

// TestDocsPageSize: no page of README.md and docs/*.md exceeds
// maxPageBytes, and docs/*.md together stay within maxDocsBytes.
func TestDocsPageSize(t *testing.T) {
	t.Parallel()
	var docs int64
	for _, page := range docPages(t) {
		info, err := os.Stat(page)
		require.NoError(t, err)
		assert.LessOrEqual(t, info.Size(), int64(maxPageBytes), "%s: %d bytes, at most %d", page, info.Size(), maxPageBytes)
		if strings.HasPrefix(filepath.ToSlash(page), "docs/") {
			docs += info.Size()
		}
	}
	assert.Positive(t, docs, "the pages of docs/ were read")
	assert.LessOrEqual(t, docs, int64(maxDocsBytes), "docs/*.md together: %d bytes, at most %d: cut, or move what is not for users to benchmarks/HISTORY.md", docs, maxDocsBytes)
}

// TestDocLines: a generated block is marked line by line, and a block that
// nests, does not end, ends without a beginning or names no script is an
// error.
func TestDocLines(t *testing.T) {
	t.Parallel()
	const (
		begin = "<!-- generated by docs_test.go: begin -->"
		end   = "<!-- generated by docs_test.go: end -->"
	)
	lines, err := docLines("a\n" + begin + "\n| 1.23 ms |\n" + end + "\n```\n" + begin + "\n```\nb")
	require.NoError(t, err)
	var generated, fenced []int
	for _, l := range lines {
		if l.generated {
			generated = append(generated, l.n)
		}
		if l.fenced {
			fenced = append(fenced, l.n)
		}
	}
	assert.Equal(t, []int{2, 3, 4}, generated, "the markers and what is between them")
	assert.Equal(t, []int{5, 6, 7}, fenced, "a marker in a code block is code")
	for _, src := range []string{
		begin + "\n" + begin + "\n" + end,
		begin + "\nx",
		end,
		"<!-- generated by no/such/script.sh: begin -->\n<!-- generated by no/such/script.sh: end -->",
	} {
		_, err := docLines(src)
		assert.Error(t, err, "%q", src)
	}
}
