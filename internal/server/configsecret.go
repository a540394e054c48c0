package server

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"

	"github.com/compactd/compactd/internal/store/redisstore"
	"gopkg.in/yaml.v3"
)

// redactedPassword is what redisstore.Redact (and so GET /v1/config)
// shows in place of state.url's password.
const redactedPassword = "xxxxx"

// keepStateSecret makes a GET-then-PUT of /v1/config safe: GET shows
// state.url with its password redacted, and a PUT that sends that value
// back would otherwise write "xxxxx" as the password. A patch whose
// state.url is exactly the running URL as GET shows it gets the running
// URL, secret included; a patch whose state.url has the redacted password
// but is another URL is refused (compactd cannot know the password). Any
// other patch is returned as it is (Update reports what is wrong with it).
func keepStateSecret(patch []byte, running string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(patch, &doc); err != nil || len(doc.Content) == 0 {
		return patch, nil
	}
	node := mappingValue(mappingValue(doc.Content[0], "state"), "url")
	if node == nil || node.Kind != yaml.ScalarNode || !hasRedactedPassword(node.Value) {
		return patch, nil
	}
	if running == "" || node.Value != redisstore.Redact(running) {
		return nil, apiErrorf(http.StatusBadRequest, CodeBadRequest,
			"state.url %s carries the password as GET /v1/config shows it (%q, redacted), and it is not the running URL: send the real password (or use state.password_file), or leave state.url out to keep the running one",
			node.Value, redactedPassword)
	}
	node.Value = running
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// mappingValue returns the value of key in a mapping node, or nil.
func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// hasRedactedPassword reports whether any address of a state.url (several
// are comma-separated) has the redacted password.
func hasRedactedPassword(raw string) bool {
	for _, p := range strings.Split(raw, ",") {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			continue
		}
		if pw, ok := u.User.Password(); ok && pw == redactedPassword {
			return true
		}
	}
	return false
}
