package cli_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// `compactd provider` serves the local provider until SIGINT, then says
// what it served; it refuses what the real API refuses.
func TestProviderCommand(t *testing.T) {
	dir := t.TempDir()
	addrFile := filepath.Join(dir, "addr")
	cmd := exec.Command(compactdBinary(t), "provider", "--listen", "127.0.0.1:0", "--addr-file", addrFile, "--openai-key", "sk-mine")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
	})
	var addr string
	for addr == "" {
		select {
		case err := <-exited:
			t.Fatalf("provider exited: %v\n%s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		b, _ := os.ReadFile(addrFile)
		addr = strings.TrimSpace(string(b))
	}
	post := func(key, body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("sk-mine", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`); code != 200 || !strings.Contains(body, `"content":"echo: hi"`) {
		t.Fatalf("%d %s", code, body)
	}
	if code, body := post("sk-other", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`); code != 401 {
		t.Fatalf("another key: %d %s", code, body)
	}
	if code, body := post("sk-mine", `{"model":"gpt-4o","messages":[{"role":"tool","tool_call_id":"call_1","content":"x"}]}`); code != 400 || !strings.Contains(body, "must be a response to a preceeding message with 'tool_calls'") {
		t.Fatalf("orphan tool result: %d %s", code, body)
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := <-exited; err != nil {
		t.Fatalf("exit: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"provider: listening on " + addr, "provider: refused POST /v1/chat/completions: 400", "provider: chat.completions: 2 requests (0 streamed), 1 refused, 0 tool calls"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}

func TestProviderCommandFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"provider", "--parallel-every", "-1"}, 2, "--parallel-every -1: want 0 or more"},
		{[]string{"provider", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"provider", "--listen", "256.0.0.1:1"}, 1, "compactd: provider: listen tcp"},
	} {
		r := run(t, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
}
