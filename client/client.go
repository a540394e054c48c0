// Package client talks to a compactd daemon over its Unix socket (or its
// optional loopback TCP listener). It holds the API's request and response
// types; the daemon uses the same types, so they are the API's reference in
// Go.
//
//	c := client.New("") // the default socket
//	resp, err := c.Compact(ctx, &client.CompactRequest{Policy: "sliding", Messages: msgs})
//
// A Client is safe for concurrent use and reuses connections.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Client calls a compactd daemon.
type Client struct {
	http      *http.Client
	transport *http.Transport
	base      string
	token     string
}

// DefaultSocketPath is the daemon's default socket in this process's
// environment: SocketPath(os.Getenv).
func DefaultSocketPath() string { return SocketPath(os.Getenv) }

// SocketPath is the daemon's default socket in the environment getenv
// reads: $COMPACTD_SOCKET, else $XDG_RUNTIME_DIR/compactd.sock, else
// $XDG_STATE_HOME/compactd/compactd.sock
// (~/.local/state/compactd/compactd.sock; without a home, under the
// temporary directory). It is the path `compactd serve` listens on
// without --socket; the Python and TypeScript clients follow the same
// rule.
func SocketPath(getenv func(string) string) string {
	if p := getenv("COMPACTD_SOCKET"); p != "" {
		return p
	}
	if d := getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "compactd.sock")
	}
	state := getenv("XDG_STATE_HOME")
	if state == "" {
		home := getenv("HOME")
		if home == "" {
			home = os.TempDir()
		}
		state = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(state, "compactd", "compactd.sock")
}

// Option configures a Client.
type Option func(*options)

type options struct {
	wrap func(http.RoundTripper) http.RoundTripper
}

// WrapTransport wraps the client's HTTP transport, e.g. to log, trace or
// check its exchanges. The transport given to f dials the daemon.
func WrapTransport(f func(http.RoundTripper) http.RoundTripper) Option {
	return func(o *options) { o.wrap = f }
}

func newClient(tr *http.Transport, base, token string, opts []Option) *Client {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	var rt http.RoundTripper = tr
	if o.wrap != nil {
		rt = o.wrap(tr)
	}
	return &Client{http: &http.Client{Transport: rt}, base: base, token: token, transport: tr}
}

// New returns a client for the daemon listening on the Unix socket at path
// ("" means DefaultSocketPath).
func New(path string, opts ...Option) *Client {
	if path == "" {
		path = DefaultSocketPath()
	}
	var d net.Dialer
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
	return newClient(tr, "http://compactd", "", opts)
}

// NewTCP returns a client for the daemon's loopback TCP listener
// ("127.0.0.1:7077"), authenticating with the bearer token.
func NewTCP(addr, token string, opts ...Option) *Client {
	tr := &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}
	return newClient(tr, "http://"+addr, token, opts)
}

// Close releases idle connections.
func (c *Client) Close() { c.transport.CloseIdleConnections() }

// Error is an error answer from the daemon. Test for it with errors.As.
type Error struct {
	StatusCode int    // HTTP status
	Code       string // stable code, e.g. "unknown_policy"
	Message    string
}

func (e *Error) Error() string {
	return fmt.Sprintf("compactd: %s (HTTP %d): %s", e.Code, e.StatusCode, e.Message)
}

// IsCode reports whether err is an *Error with the given code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// do sends a request and decodes a JSON answer into out (if not nil).
func (c *Client) do(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		var b []byte
		var err error
		if cr, ok := body.(*CompactRequest); ok {
			b, err = cr.encode()
		} else {
			b, err = json.Marshal(body)
		}
		if err != nil {
			return fmt.Errorf("compactd: encoding request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("compactd: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("compactd: reading answer: %w", err)
	}
	if resp.StatusCode >= 300 {
		var eb ErrorBody
		if json.Unmarshal(data, &eb) == nil && eb.Error.Code != "" {
			return &Error{StatusCode: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
		}
		return &Error{StatusCode: resp.StatusCode, Code: "http_" + strconv.Itoa(resp.StatusCode), Message: string(bytes.TrimSpace(data))}
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = data
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("compactd: decoding answer: %w", err)
	}
	return nil
}

// Compact compacts a conversation (POST /v1/compact).
func (c *Client) Compact(ctx context.Context, req *CompactRequest) (*CompactResponse, error) {
	var out CompactResponse
	if err := c.do(ctx, http.MethodPost, "/v1/compact", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Policies lists the plugin files and their policies (GET /v1/policies).
func (c *Client) Policies(ctx context.Context) ([]Policy, error) {
	var out PolicyList
	if err := c.do(ctx, http.MethodGet, "/v1/policies", nil, &out); err != nil {
		return nil, err
	}
	return out.Policies, nil
}

// Policy describes one policy (GET /v1/policies/{name}).
func (c *Client) Policy(ctx context.Context, name string) (*Policy, error) {
	var out Policy
	if err := c.do(ctx, http.MethodGet, "/v1/policies/"+url.PathEscape(name), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RetryPolicy loads a plugin file again now (POST
// /v1/policies/{name}/retry), lifting its quarantine or the failure of
// its bytes the daemon remembers; name is the policy, or the file's name.
// It returns the file's state once the load is over.
func (c *Client) RetryPolicy(ctx context.Context, name string) (*Policy, error) {
	var out Policy
	if err := c.do(ctx, http.MethodPost, "/v1/policies/"+url.PathEscape(name)+"/retry", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Status returns the daemon's status and its most recently seen
// conversations, at most limit of them (0: the daemon's default, 100).
func (c *Client) Status(ctx context.Context, limit int) (*Status, error) {
	return c.StatusWith(ctx, StatusOptions{Limit: max(limit, 0)})
}

// StatusOptions choose the conversations StatusWith lists: at most Limit
// (0: the daemon's default, 100) of those matching Q (found in the id,
// title, user, model, tags or pipeline, case-insensitively), carrying
// every tag in Tags, and of User (both exact; empty: any).
type StatusOptions struct {
	Limit int
	Q     string
	Tags  []string
	User  string
}

// StatusWith is Status with a search: GET /v1/status?q=&tag=&user=.
func (c *Client) StatusWith(ctx context.Context, o StatusOptions) (*Status, error) {
	if o.Limit < 0 {
		return nil, errors.New("compactd: StatusOptions.Limit is negative; want 0 (the default) or more")
	}
	q := url.Values{}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Q != "" {
		q.Set("q", o.Q)
	}
	for _, t := range o.Tags {
		q.Add("tag", t)
	}
	if o.User != "" {
		q.Set("user", o.User)
	}
	path := "/v1/status"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out Status
	if err := c.do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Conversation returns one conversation's status.
func (c *Client) Conversation(ctx context.Context, id string) (*Conversation, error) {
	var out Conversation
	if err := c.do(ctx, http.MethodGet, "/v1/status?conversation_id="+url.QueryEscape(id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Config returns the running config (GET /v1/config).
func (c *Client) Config(ctx context.Context) (*ConfigDocument, error) {
	var out ConfigDocument
	if err := c.do(ctx, http.MethodGet, "/v1/config", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UpdateConfig applies a partial update (PUT /v1/config): patch is a JSON
// merge patch, e.g. map[string]any{"policies": map[string]any{"sliding":
// map[string]any{"window_size": 8}}}; a nil value deletes a key. The
// daemon validates it and writes it to its config file.
func (c *Client) UpdateConfig(ctx context.Context, patch any) (*ConfigDocument, error) {
	var out ConfigDocument
	if err := c.do(ctx, http.MethodPut, "/v1/config", patch, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Health checks that the daemon answers (GET /healthz).
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var out Health
	if err := c.do(ctx, http.MethodGet, "/healthz", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Metrics returns the Prometheus text exposition (GET /metrics).
func (c *Client) Metrics(ctx context.Context) (string, error) {
	var out []byte
	if err := c.do(ctx, http.MethodGet, "/metrics", nil, &out); err != nil {
		return "", err
	}
	return string(out), nil
}

// encode writes the request with its messages as they are: json.Marshal
// would compact their whitespace and escape <, > and &, and the daemon
// returns kept messages byte for byte as it received them.
func (r *CompactRequest) encode() ([]byte, error) {
	head := *r
	head.Messages = nil
	b, err := json.Marshal(struct {
		*CompactRequest
		Messages []json.RawMessage `json:"messages,omitempty"`
	}{CompactRequest: &head})
	if err != nil {
		return nil, err
	}
	size := len(b) + 16
	for _, m := range r.Messages {
		size += len(m) + 1
	}
	out := make([]byte, 0, size)
	out = append(out, b[:len(b)-1]...) // without the closing brace
	if len(b) > 2 {
		out = append(out, ',')
	}
	out = append(out, `"messages":[`...)
	for i, m := range r.Messages {
		if !json.Valid(m) {
			return nil, fmt.Errorf("message %d is not valid JSON", i)
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m...)
	}
	return append(out, "]}"...), nil
}
