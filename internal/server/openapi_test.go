package server

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/compactd/compactd/api"
	"github.com/compactd/compactd/api/apitest"
	"gopkg.in/yaml.v3"
)

// spec validates every exchange the tests' clients make (apiClient,
// unixHTTP, tcpHTTP) against api/openapi.yaml, and records which
// documented responses the suite produced.
var spec *apitest.Validator

func TestMain(m *testing.M) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		os.Exit(runChildDaemon(dir, os.Getenv(childCacheEnv)))
	}
	flag.Parse()
	v, err := apitest.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	spec = v
	code := m.Run()
	if code == 0 && fullRun() {
		code = checkCoverage()
	}
	os.Exit(code)
}

// fullRun reports whether every test ran (no -run, -skip or -short), so
// that the documented responses the suite never produced mean something.
func fullRun() bool {
	for _, name := range []string{"test.run", "test.skip"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return false
		}
	}
	return !testing.Short()
}

// neverProduced are the documented responses the suite cannot provoke
// through the API: a 500 is a bug.
func neverProduced(key string) bool { return strings.HasSuffix(key, " 500") }

// checkCoverage fails when a documented response was never produced by
// the suite (apart from neverProduced): a documented answer nothing tests
// is a guess. With -v it prints what was covered.
func checkCoverage() int {
	var missing []string
	for _, key := range spec.Unseen() {
		if !neverProduced(key) {
			missing = append(missing, key)
		}
	}
	if testing.Verbose() {
		seen := spec.Seen()
		keys := make([]string, 0, len(seen))
		for k := range seen {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Printf("openapi: %d documented responses, %d produced by the suite:\n", len(spec.Documented()), len(spec.Documented())-len(spec.Unseen()))
		for _, k := range keys {
			fmt.Printf("  %-40s %5d\n", k, seen[k])
		}
		codes := spec.CodesSeen()
		names := make([]string, 0, len(codes))
		for c, n := range codes {
			names = append(names, fmt.Sprintf("%s (%d)", c, n))
		}
		sort.Strings(names)
		fmt.Printf("openapi: error codes seen: %s\n", strings.Join(names, ", "))
	}
	if len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: openapi.yaml documents responses no test produced (test them, or drop them from the document):\n  %s\n", strings.Join(missing, "\n  "))
		return 1
	}
	return 0
}

// TestErrorCodesMatchSpec: the Code constants are the document's ErrorCode
// enum, with the same statuses, and every code is seen by the suite.
func TestErrorCodesMatchSpec(t *testing.T) {
	t.Parallel()
	codes, err := api.ErrorCodes()
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]int{
		CodeBadRequest: 400, CodeInvalidJSON: 400, CodeInvalidConversation: 400, CodeUnsupportedFormat: 400, CodeInvalidConfig: 400, CodeNoPolicy: 400,
		CodeUnauthorized: 401, CodeForbidden: 403, CodeUnknownPolicy: 404, CodeNotFound: 404, CodeMethodNotAllowed: 405,
		CodeRequestTooLarge: 413, CodeTooManyMessages: 413, CodeInternal: 500,
	}
	if !reflect.DeepEqual(codes, ours) {
		t.Errorf("openapi.yaml's error codes %v\ndiffer from the server's %v", codes, ours)
	}
	// Every Code constant in errors.go is listed above.
	src, err := os.ReadFile("errors.go")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(regexp.MustCompile(`(?m)^\tCode\w+ +=`).FindAll(src, -1)); n != len(ours) {
		t.Errorf("errors.go declares %d Code constants; this test knows %d", n, len(ours))
	}
}

// TestSpecServed: the daemon serves the document it embeds, as YAML and
// as JSON, and both say the same.
func TestSpecServed(t *testing.T) {
	t.Parallel()
	td := startDaemon(t, "", pluginLastn)
	status, y, h := td.raw(t, "GET", "/v1/openapi.yaml", "")
	if status != 200 || string(y) != string(api.YAML()) || h.Get("Content-Type") != "application/yaml" {
		t.Fatalf("GET /v1/openapi.yaml = %d %s", status, h.Get("Content-Type"))
	}
	status, j, _ := td.raw(t, "GET", "/v1/openapi.json", "")
	var fromYAML, fromJSON any
	if err := yaml.Unmarshal(y, &fromYAML); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(j, &fromJSON); err != nil || status != 200 {
		t.Fatalf("GET /v1/openapi.json = %d, %v", status, err)
	}
	yj, _ := json.Marshal(fromYAML)
	var back any
	json.Unmarshal(yj, &back)
	if !reflect.DeepEqual(back, fromJSON) {
		t.Error("openapi.json differs from openapi.yaml")
	}
}

// TestEveryPathAnswersWrongMethodsAndAuth: every documented path answers
// a method it does not take with 405 and Allow, and every one needs the
// token on the TCP listener. New endpoints are covered as they are added
// to the document.
func TestEveryPathAnswersWrongMethodsAndAuth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte("tok\n"), 0o600)
	td := startDaemon(t, "tcp:\n  listen: 127.0.0.1:0\n  token_file: "+tokenFile+"\n", pluginLastn)
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(api.YAML(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Paths) < 8 {
		t.Fatalf("openapi.yaml has %d paths", len(doc.Paths))
	}
	tcp := tcpHTTP(t)
	for path, ops := range doc.Paths {
		url := strings.ReplaceAll(path, "{name}", "lastn")
		for _, m := range []string{"get", "put", "post", "delete", "patch"} {
			if _, ok := ops[m]; ok {
				continue
			}
			method := strings.ToUpper(m)
			status, body, h := td.raw(t, method, url, "")
			if code, _ := errorCode(t, body); status != 405 || code != CodeMethodNotAllowed || h.Get("Allow") == "" {
				t.Errorf("%s %s = %d %s, Allow %q", method, url, status, code, h.Get("Allow"))
			}
		}
		for m := range ops {
			req, _ := http.NewRequest(strings.ToUpper(m), "http://"+td.TCPAddr()+url, nil)
			resp, err := tcp.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := 401
			if path == "/healthz" {
				want = 200 // uptime checks: the status alone, without a token
			}
			if resp.StatusCode != want {
				t.Errorf("%s %s over TCP without a token = %d, want %d", m, url, resp.StatusCode, want)
			}
		}
	}
}
