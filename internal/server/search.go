package server

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/compactd/compactd/internal/convlabel"
	"github.com/compactd/compactd/internal/store"
)

// maxQuery bounds GET /v1/status's q, in bytes.
const maxQuery = 200

// conversationFilter is GET /v1/status's search (and the status page's):
// q is found, case-insensitively, in a conversation's id, title, user,
// model, tags or pipeline; every tag in tags must be one of its tags;
// user must be its user.
type conversationFilter struct {
	Q    string
	Tags []string
	User string
}

// filterOf reads ?q=, ?tag= (repeatable) and ?user=.
func filterOf(q url.Values) (conversationFilter, error) {
	f := conversationFilter{Q: strings.TrimSpace(q.Get("q")), User: strings.TrimSpace(q.Get("user"))}
	if len(f.Q) > maxQuery {
		return f, apiErrorf(http.StatusBadRequest, CodeBadRequest, "q: %d bytes, at most %d", len(f.Q), maxQuery)
	}
	if len(f.User) > convlabel.MaxUser {
		return f, apiErrorf(http.StatusBadRequest, CodeBadRequest, "user: %d bytes, at most %d", len(f.User), convlabel.MaxUser)
	}
	var list []string
	for _, v := range q["tag"] {
		list = append(list, strings.Split(v, ",")...)
	}
	tags, err := convlabel.ParseTags(list, "tag")
	if err != nil {
		return f, apiErrorf(http.StatusBadRequest, CodeBadRequest, "%v", err)
	}
	f.Tags = tags
	return f, nil
}

func (f conversationFilter) empty() bool { return f.Q == "" && len(f.Tags) == 0 && f.User == "" }

// apply returns the conversations f matches, in order, at most limit (> 0).
func (f conversationFilter) apply(all []store.Conversation, limit int) []store.Conversation {
	q := strings.ToLower(f.Q)
	out := all[:0]
	for _, c := range all {
		if f.matches(&c, q) {
			out = append(out, c)
			if limit > 0 && len(out) == limit {
				break
			}
		}
	}
	return out
}

func (f conversationFilter) matches(c *store.Conversation, q string) bool {
	if f.User != "" && c.User != f.User {
		return false
	}
	for _, t := range f.Tags {
		if !slices.Contains(c.Tags, t) {
			return false
		}
	}
	if q == "" {
		return true
	}
	fields := append([]string{c.ID, c.Title, c.User, c.Model, c.Route}, c.Tags...)
	for _, s := range append(fields, c.Pipeline...) {
		if strings.Contains(strings.ToLower(s), q) {
			return true
		}
	}
	return false
}
