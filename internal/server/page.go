package server

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/wire/formats"
)

// The status page: server-rendered HTML for people, on the same listeners
// as the API (GET / and GET /conversation?id=ID). Prometheus metrics and
// the JSON endpoints stay the machine interface; the page shows what they
// hold, with the same numbers.

//go:embed page/*.html
var pageFiles embed.FS

// pageCookie begins the name of the cookie a browser gets for the TCP
// listener's pages in exchange for ?token= (see TokenHandler and
// pageSessions).
const pageCookie = "compactd_page"

// pageLimit is how many conversations the overview lists.
const pageLimit = 200

func parsePages() *template.Template {
	funcs := template.FuncMap{
		"num":   formatInt,
		"pct":   func(r float64) string { return strconv.FormatFloat(r*100, 'f', 1, 64) + "%" },
		"width": func(r float64) string { return strconv.FormatFloat(math.Min(math.Max(r, 0), 1)*100, 'f', 1, 64) + "%" },
		"time": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format(time.RFC3339)
		},
		"dur":  func(ns time.Duration) string { return ns.Round(10 * time.Microsecond).String() },
		"join": strings.Join,
		"convURL": func(id string) string {
			return "/conversation?id=" + url.QueryEscape(id)
		},
		"saved": func(before, after int) int { return before - after },
		// share is n / window (0 when the window is unknown).
		"share": func(n, window int) float64 {
			if window <= 0 {
				return 0
			}
			return float64(n) / float64(window)
		},
		"unit":        messageUnit,
		"shadowTable": shadowTableOf,
		"usd":         formatUSD,
		"ms":          func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + " ms" },
	}
	return template.Must(template.New("page").Funcs(funcs).ParseFS(pageFiles, "page/*.html"))
}

// formatInt writes n with thousands separators: 1234567 → "1,234,567".
func formatInt(n any) string {
	var v int64
	switch x := n.(type) {
	case int:
		v = int64(x)
	case int64:
		v = x
	case uint64:
		v = int64(x)
	}
	s := strconv.FormatInt(v, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func (s *Server) routePages() {
	s.pages = parsePages()
	s.route("/{$}", "page", map[string]handlerFunc{http.MethodGet: s.handleOverviewPage})
	s.route("/conversation", "page", map[string]handlerFunc{http.MethodGet: s.handleConversationPage})
}

// isPage reports whether r asks for a page (the routes routePages adds).
func isPage(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && (r.URL.Path == "/" || r.URL.Path == "/conversation")
}

// messageUnit names what a conversation's message counts count: the
// messages of its wire format as the client sent them (a proxied
// conversation's provider: a format's name), or chat messages
// (/v1/compact, which counts them after converting its "format").
func messageUnit(format string) string {
	if f, ok := formats.Lookup(format); ok && format != "" {
		return f.MessageUnit()
	}
	return "chat messages"
}

// filterView is the overview's search form.
type filterView struct {
	Q, Tag, User string
	Active       bool
}

type overviewPage struct {
	Filter   filterView
	Status   client.Status
	Policies []client.Policy
	Config   configView
	Shown    int // conversations listed (at most pageLimit)
	Store    storeView
}

// storeView says whether the daemon shares its store with a fleet: then
// the totals and conversations on the page are the fleet's, and each
// conversation names the replica that served it last.
type storeView struct {
	Shared   bool
	Describe string // the store's URL, password left out
	Replica  string // this daemon's name in the fleet
	Degraded bool
}

// storeViewOf describes the daemon's store for the pages.
func (s *Server) storeViewOf() storeView {
	h := s.opts.Store.Health()
	v := storeView{Shared: h.Backend == "redis", Describe: s.opts.Store.Describe(), Degraded: h.Degraded}
	if r, ok := s.opts.Store.(interface{ Replica() string }); ok {
		v.Replica = r.Replica()
	}
	return v
}

type configView struct {
	File     string
	JSON     string
	Warnings []string
	Errors   []string
}

func (s *Server) handleOverviewPage(w http.ResponseWriter, r *http.Request) error {
	f, err := filterOf(r.URL.Query())
	if err != nil {
		return s.render(w, http.StatusBadRequest, "problem", "This search cannot run: "+err.Error())
	}
	data := overviewPage{Status: s.status(pageLimit, f), Store: s.storeViewOf(),
		Filter: filterView{Q: f.Q, Tag: strings.Join(f.Tags, ","), User: f.User, Active: !f.empty()}}
	for _, in := range s.opts.Registry.Policies() {
		data.Policies = append(data.Policies, policyOf(in))
	}
	data.Shown = len(data.Status.Conversations)
	doc, err := s.runningConfig()
	if err != nil {
		return err
	}
	var pretty bytes.Buffer
	json.Indent(&pretty, doc.Config, "", "  ")
	data.Config = configView{File: doc.File, JSON: pretty.String(), Warnings: doc.Warnings, Errors: doc.Errors}
	return s.render(w, http.StatusOK, "overview", data)
}

type conversationPage struct {
	Conversation *client.Conversation
	Detail       *client.CompactionDetail
	Timeline     *timeline
}

func (s *Server) handleConversationPage(w http.ResponseWriter, r *http.Request) error {
	id := r.URL.Query().Get("id")
	if id == "" {
		return s.render(w, http.StatusBadRequest, "problem", "Which conversation? This page takes ?id=CONVERSATION_ID.")
	}
	c, err := s.conversation(r.Context(), id)
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return s.render(w, http.StatusNotFound, "problem", fmt.Sprintf("No tracked conversation %q: it expired, or never reached this daemon.", id))
	}
	if err != nil {
		return err
	}
	return s.render(w, http.StatusOK, "conversation", conversationPage{Conversation: c, Detail: c.LastCompaction, Timeline: s.timelineOf(r.Context(), id)})
}

// render executes a page template into a buffer first, so a template
// error becomes a 500 rather than half a page.
func (s *Server) render(w http.ResponseWriter, status int, name string, data any) error {
	var buf bytes.Buffer
	if err := s.pages.ExecuteTemplate(&buf, name, data); err != nil {
		return fmt.Errorf("rendering the %s page: %w", name, err)
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
	return nil
}

// pageSessionTTL is how long a status page cookie opens the pages.
const pageSessionTTL = 12 * time.Hour

// pageSessions issues and checks the status page's cookies. A browser
// sends a host's cookies to every port of it, and keeps them across the
// daemon's restarts; so a cookie here is good for one listener, one
// daemon process and pageSessionTTL only: its name carries the
// listener's port (two daemons on one host keep their own), and its value
// is its expiry and an HMAC of it and the listener's address, under a key
// drawn at random when the daemon starts and mixed with the token. It
// carries neither the token nor anything a restarted daemon would take.
type pageSessions struct {
	key []byte
	now func() time.Time
}

func newPageSessions(token string) *pageSessions {
	secret := make([]byte, 32)
	rand.Read(secret)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(token))
	return &pageSessions{key: m.Sum(nil), now: time.Now}
}

// listenerOf returns the address of the listener r came in on.
func listenerOf(r *http.Request) string {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		return a.String()
	}
	return ""
}

// cookieName is the page cookie's name on a listener: pageCookie and its
// port.
func cookieName(listener string) string {
	if _, port, err := net.SplitHostPort(listener); err == nil {
		return pageCookie + "_" + port
	}
	return pageCookie
}

func (ps *pageSessions) mac(listener string, expires int64) string {
	m := hmac.New(sha256.New, ps.key)
	fmt.Fprintf(m, "compactd status page session\x00%s\x00%d", listener, expires)
	return hex.EncodeToString(m.Sum(nil))
}

// issue returns a new cookie for the listener.
func (ps *pageSessions) issue(listener string) *http.Cookie {
	exp := ps.now().Add(pageSessionTTL).Truncate(time.Second)
	return &http.Cookie{
		Name: cookieName(listener), Value: strconv.FormatInt(exp.Unix(), 10) + "." + ps.mac(listener, exp.Unix()),
		Path: "/", Expires: exp, MaxAge: int(pageSessionTTL / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode,
	}
}

// valid reports whether r carries a cookie this daemon issued for this
// listener, unexpired.
func (ps *pageSessions) valid(r *http.Request) bool {
	listener := listenerOf(r)
	c, err := r.Cookie(cookieName(listener))
	if err != nil {
		return false
	}
	expText, mac, ok := strings.Cut(c.Value, ".")
	exp, err := strconv.ParseInt(expText, 10, 64)
	if !ok || err != nil || ps.now().Unix() >= exp {
		return false
	}
	return hmac.Equal([]byte(mac), []byte(ps.mac(listener, exp)))
}

// pageAuth lets a browser onto the TCP listener's pages, which it cannot
// send a bearer header to: ?token=TOKEN on a page sets an HttpOnly,
// SameSite=Strict cookie (pageSessions: this listener, this daemon
// process, 12 hours) and redirects to the same page without the token;
// the cookie then opens the pages (GET and HEAD only, never the API). It
// reports whether it handled r (redirect) or r carries a valid cookie.
func (s *Server) pageAuth(w http.ResponseWriter, r *http.Request, token string, sessions *pageSessions) (handled, ok bool) {
	if !isPage(r) {
		return false, false
	}
	q := r.URL.Query()
	if t := q.Get("token"); t != "" && subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
		http.SetCookie(w, sessions.issue(listenerOf(r)))
		q.Del("token")
		u := *r.URL
		u.RawQuery = q.Encode()
		w.Header().Set("Location", u.RequestURI())
		w.WriteHeader(http.StatusSeeOther)
		s.metrics.requests.add(1, "page", "303")
		return true, false
	}
	return false, sessions.valid(r)
}
