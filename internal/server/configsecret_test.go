package server

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/compactd/compactd/client"
	"github.com/compactd/compactd/internal/store/redisstore/redistest"
)

// TestConfigKeepsStateSecret: GET /v1/config shows state.url with its
// password redacted; PUTting that document back keeps the real password
// (in the file, and the store still connects), the PUT's answer is
// redacted too, and a state.url that carries the redacted password but is
// another URL is refused with an error that says why.
func TestConfigKeepsStateSecret(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const secret = "s3cret-pw"
	if err := srv.Client().ConfigSet(bg, "requirepass", secret).Err(); err != nil {
		t.Fatal(err)
	}
	url := "unix://:" + secret + "@" + srv.Sock
	td := startDaemon(t, "state:\n  url: "+url+"\n", pluginLastn)
	if h, err := td.c.Health(bg); err != nil || h.Store == nil || h.Store.Degraded {
		t.Fatalf("health with the shared store: %+v %v", h, err)
	}
	doc, err := td.c.Config(bg)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(doc.Config), secret) || !strings.Contains(string(doc.Config), ":xxxxx@") {
		t.Fatalf("GET /v1/config does not redact the password: %s", doc.Config)
	}

	// GET, then PUT the same document back.
	var whole map[string]any
	if err := json.Unmarshal(doc.Config, &whole); err != nil {
		t.Fatal(err)
	}
	put, err := td.c.UpdateConfig(bg, whole)
	if err != nil {
		t.Fatalf("PUT of the GET document: %v", err)
	}
	if strings.Contains(string(put.Config), secret) {
		t.Errorf("the PUT's answer shows the password: %s", put.Config)
	}
	file, err := os.ReadFile(td.config)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(file), url) || strings.Contains(string(file), "xxxxx") {
		t.Errorf("the config file after GET-then-PUT:\n%s\nwant state.url %s, not the redacted one", file, url)
	}
	if got := td.Config().Current().State.URL; got != url {
		t.Errorf("running state.url %q, want %q", got, url)
	}

	// The redacted password on another URL cannot be restored.
	_, err = td.c.UpdateConfig(bg, map[string]any{"state": map[string]any{"url": "unix://:xxxxx@/elsewhere/r.sock"}})
	var ae *client.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || !strings.Contains(ae.Message, "redacted") {
		t.Fatalf("PUT of another URL with the redacted password: %v, want a 400 saying the password is redacted", err)
	}
	if got := td.Config().Current().State.URL; got != url {
		t.Errorf("after the refused PUT, state.url %q, want %q", got, url)
	}
	// A new URL with a real password is taken as it is.
	other := "unix://:other-pw@" + srv.Sock
	if _, err := td.c.UpdateConfig(bg, map[string]any{"state": map[string]any{"url": other}}); err != nil {
		t.Fatal(err)
	}
	if got := td.Config().Current().State.URL; got != other {
		t.Errorf("state.url %q after a PUT of a new URL, want %q", got, other)
	}
}
