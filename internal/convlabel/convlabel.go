// Package convlabel makes the labels people recognise a conversation by:
// a title (given, or the first line of the conversation's task), tags and
// a user. It reads them from the X-Compactd-Title, X-Compactd-Tags and
// X-Compactd-User headers (or /v1/compact's fields) and checks them.
package convlabel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/compactd/compactd/abi"
)

// Headers a request labels its conversation with.
const (
	HeaderTitle = "X-Compactd-Title"
	HeaderTags  = "X-Compactd-Tags"
	HeaderUser  = "X-Compactd-User"
)

// Bounds of the labels.
const (
	// TitleLength is the length a derived title is cut to, on a word
	// boundary when there is one.
	TitleLength = 80
	// MaxTitle and MaxUser bound a given title and user, in bytes.
	MaxTitle = 200
	MaxUser  = 200
	// MaxTags and MaxTag bound the tags: how many, and each one's bytes.
	MaxTags = 16
	MaxTag  = 64
)

// Labels are a conversation's title, tags and user (empty: not given).
type Labels struct {
	Title string
	Tags  []string
	User  string
}

// Parse checks given labels: the title and user are trimmed, tags is a
// comma-separated list (each trimmed, empty ones and repeats dropped).
// Each must be printable UTF-8 within its bound; the error names what is
// wrong with which (where says where it came from: "X-Compactd-" headers
// or request fields).
func Parse(title, tags, user string, where func(label string) string) (Labels, error) {
	var l Labels
	var err error
	if l.Title, err = text(strings.TrimSpace(title), MaxTitle, where("title")); err != nil {
		return Labels{}, err
	}
	if l.User, err = text(strings.TrimSpace(user), MaxUser, where("user")); err != nil {
		return Labels{}, err
	}
	if l.Tags, err = ParseTags(strings.Split(tags, ","), where("tags")); err != nil {
		return Labels{}, err
	}
	return l, nil
}

// ParseTags checks a list of tags: each is trimmed, empty ones and
// repeats are dropped, and at most MaxTags of at most MaxTag bytes of
// printable UTF-8 remain (nil when none).
func ParseTags(list []string, name string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, t := range list {
		t, err := text(strings.TrimSpace(t), MaxTag, name+" (each tag)")
		if err != nil {
			return nil, err
		}
		if t == "" || seen[t] {
			continue
		}
		seen[t] = true
		out = append(out, t)
	}
	if len(out) > MaxTags {
		return nil, fmt.Errorf("%s: %d tags, at most %d", name, len(out), MaxTags)
	}
	return out, nil
}

func text(s string, limit int, name string) (string, error) {
	if len(s) > limit {
		return "", fmt.Errorf("%s: %d bytes, at most %d", name, len(s), limit)
	}
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(c rune) bool { return !unicode.IsPrint(c) && c != ' ' }) {
		return "", fmt.Errorf("%s must be printable UTF-8", name)
	}
	return s, nil
}

// Title derives a conversation's title from its messages: the first
// non-blank line of its first user message's text, spaces collapsed,
// cut to TitleLength on a word boundary ("…" marks a cut). Nothing else
// of the conversation is kept. It is "" when there is no user text.
func Title(msgs []abi.Message) string {
	for i := range msgs {
		if msgs[i].Role != abi.RoleUser {
			continue
		}
		for line := range strings.Lines(leadingText(msgs[i].Content)) {
			if t := strings.Join(strings.FieldsFunc(line, notPrintable), " "); t != "" {
				return Cut(t, TitleLength)
			}
		}
		return ""
	}
	return ""
}

// prefixBytes is how much of a long string content leadingText decodes:
// enough for a title's line, whatever the escapes.
const prefixBytes = 16 * TitleLength

// leadingText returns the content's text, or for a long JSON string only
// its beginning: decoding a pasted file whole to read its first line took
// milliseconds a request (BenchmarkTitle).
func leadingText(c abi.Content) string {
	raw := c.Raw()
	if len(raw) <= prefixBytes+8 || raw[0] != '"' {
		return c.Text()
	}
	head := raw[:prefixBytes]
	// Cut before an escape the cut would split (an escape is at most 12
	// bytes: a surrogate pair's two \uXXXX).
	if k := bytes.LastIndexByte(head[len(head)-12:], '\\'); k >= 0 {
		k += len(head) - 12
		for k > 0 && head[k-1] == '\\' { // the start of a run of escaped backslashes
			k--
		}
		head = head[:k]
	}
	var text string
	if err := json.Unmarshal(append(append([]byte{}, head...), '"'), &text); err != nil {
		return c.Text()
	}
	return text
}

func notPrintable(c rune) bool { return unicode.IsSpace(c) || !unicode.IsPrint(c) }

// Cut shortens s to at most limit runes, at the last space within them
// when that keeps at least half, and marks a cut with "…".
func Cut(s string, limit int) string {
	if utf8.RuneCountInString(s) <= limit {
		return s
	}
	n, end := 0, len(s)
	for i := range s {
		if n == limit-1 { // room for "…"
			end = i
			break
		}
		n++
	}
	head := s[:end]
	if k := strings.LastIndexByte(head, ' '); k >= end/2 {
		head = head[:k]
	}
	return strings.TrimRight(head, " ,.;:") + "…"
}
