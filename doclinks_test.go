package compactd_test

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinks checks every relative link of every Markdown file in the
// repository: the file it names exists, and so does the heading its
// #fragment names (GitHub's anchors). Moving a section from one doc to
// another breaks the links to it; this finds them.
func TestDocLinks(t *testing.T) {
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	files, err := markdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{} // slash path -> text
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		docs[f] = string(b)
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(doc string) map[string]bool {
		if a, ok := anchors[doc]; ok {
			return a
		}
		a := headingAnchors(docs[doc])
		anchors[doc] = a
		return a
	}
	checked := 0
	for doc, text := range docs {
		for _, l := range markdownLinks(text) {
			target, fragment, _ := strings.Cut(l.target, "#")
			if target == "" && fragment == "" {
				continue
			}
			u, err := url.Parse(target)
			if err != nil || u.Scheme != "" || strings.HasPrefix(target, "/") {
				continue // absolute: not this repository's to check
			}
			checked++
			where := fmt.Sprintf("%s:%d: link %q", doc, l.line, l.target)
			dest := doc
			if target != "" {
				target, _ = url.PathUnescape(target)
				dest = path.Clean(path.Join(path.Dir(doc), target))
				if strings.HasPrefix(dest, "../") {
					continue // outside the repository (../shared/data)
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest))); err != nil {
					t.Errorf("%s: %s does not exist", where, dest)
					continue
				}
			}
			if fragment == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if _, ok := docs[dest]; !ok {
				continue
			}
			if !anchorsOf(dest)[fragment] {
				t.Errorf("%s: %s has no heading with the anchor #%s", where, dest, fragment)
			}
		}
	}
	if checked < 100 {
		t.Errorf("checked only %d links; is the parser broken?", checked)
	}
	t.Logf("checked %d relative links in %d Markdown files", checked, len(docs))
}

// mdLink is a Markdown link's target and line.
type mdLink struct {
	target string
	line   int
}

var (
	inlineLink = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
)

// markdownLinks returns the inline links (and images) of a Markdown text,
// outside fenced code blocks and code spans.
func markdownLinks(text string) []mdLink {
	var out []mdLink
	for _, l := range proseLines(text) {
		// A code span inside a link's text ([`x`](y)) keeps the link.
		line := codeSpan.ReplaceAllStringFunc(l.text, func(s string) string { return strings.Repeat("x", len(s)) })
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			out = append(out, mdLink{target: m[1], line: l.n})
		}
	}
	return out
}

// textLine is a line of a document and its 1-based number.
type textLine struct {
	n    int
	text string
}

// proseLines returns the lines of a Markdown text that are outside fenced
// code blocks (and are not fences).
func proseLines(text string) []textLine {
	var out []textLine
	inFence := ""
	for i, line := range strings.Split(text, "\n") {
		if m := fence.FindStringSubmatch(line); m != nil {
			switch {
			case inFence == "":
				inFence = m[1]
			case strings.HasPrefix(line, inFence) && strings.TrimSpace(m[2]) == "":
				inFence = ""
			}
			continue
		}
		if inFence == "" {
			out = append(out, textLine{i + 1, line})
		}
	}
	return out
}

// headingAnchors returns the anchors GitHub gives a document's headings:
// lower case, punctuation dropped (but - and _), spaces to hyphens, a
// repeated one numbered -1, -2, …
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	count := map[string]int{}
	for _, l := range proseLines(text) {
		line := l.text
		if !strings.HasPrefix(line, "#") {
			continue
		}
		rest := strings.TrimLeft(line, "#")
		title := strings.TrimSpace(rest)
		if title == "" || len(line)-len(rest) > 6 || !strings.HasPrefix(rest, " ") {
			continue
		}
		a := slug(title)
		if n := count[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		count[a]++
	}
	// Explicit anchors: <a name="x"></a> or id="x".
	for _, m := range regexp.MustCompile(`<a (?:name|id)="([^"]+)"`).FindAllStringSubmatch(text, -1) {
		anchors[m[1]] = true
	}
	return anchors
}

// slug is GitHub's anchor for a heading's text.
func slug(title string) string {
	// Link text stands for the link: [text](target) -> text.
	title = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(title, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	tests := []struct{ heading, want string }{
		{"The config file", "the-config-file"},
		{"`POST /v1/compact`", "post-v1compact"},
		{"`GET` and `PUT /v1/config`", "get-and-put-v1config"},
		{"When it compacts: the request filter", "when-it-compacts-the-request-filter"},
		{"The upstream's answers are the caller's", "the-upstreams-answers-are-the-callers"},
		{"The fast path (optional)", "the-fast-path-optional"},
		{"Refs: keep what you keep byte for byte", "refs-keep-what-you-keep-byte-for-byte"},
		{"`compactd eval` — measuring a policy", "compactd-eval--measuring-a-policy"},
		{"rlm-code's keys", "rlm-codes-keys"},
	}
	for _, tt := range tests {
		if got := slug(tt.heading); got != tt.want {
			t.Errorf("slug(%q) = %q, want %q", tt.heading, got, tt.want)
		}
	}
	a := headingAnchors("# A\n## A\n```sh\n# not a heading\n```\n### B\n")
	for _, want := range []string{"a", "a-1", "b"} {
		if !a[want] {
			t.Errorf("anchors %v lack %q", a, want)
		}
	}
	if a["not-a-heading"] {
		t.Error("a comment in a code block became a heading")
	}
	links := markdownLinks("see [`x`](docs/x.md#y) and `[no](link)`\n```\n[no](link)\n```\n![img](a.png)\n")
	if len(links) != 2 || links[0].target != "docs/x.md#y" || links[1].target != "a.png" {
		t.Errorf("links = %+v", links)
	}
}
