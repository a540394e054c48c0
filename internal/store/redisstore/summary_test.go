package redisstore_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/internal/llm"
	"github.com/compactd/compactd/internal/store"
	"github.com/compactd/compactd/internal/store/redisstore"
	"github.com/compactd/compactd/internal/store/redisstore/redistest"
)

// TestSummaryOnceFleetWide: three daemons' LLM clients, each with the
// shared summary cache, ask for the same summary at once; the provider
// (a local server speaking OpenAI's format, slow on purpose so the asks
// overlap) is called once and every daemon gets the same bytes.
func TestSummaryOnceFleetWide(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var calls atomic.Int64
	release := make(chan struct{})
	prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		io.Copy(io.Discard, r.Body)
		<-release // held until every daemon has asked
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"the summary"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`)
	}))
	defer prov.Close()
	var clients []*llm.Client
	for i := 0; i < 3; i++ {
		s := open(t, srv.URL(), redisstore.Options{})
		b, err := s.OpenBucket("llm_cache", store.BucketOptions{MaxBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		c, err := llm.New(llm.Config{Provider: "openai", BaseURL: prov.URL, Model: "m", Timeout: 30 * time.Second}, llm.WithCache(llm.NewKVCache(b)))
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	req := abi.LLMRequest{Messages: []abi.LLMMessage{{Role: "user", Content: "summarize this span"}}}
	var wg sync.WaitGroup
	answers := make([]string, len(clients))
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Complete(context.Background(), req)
			if err != nil {
				t.Error(err)
				return
			}
			answers[i] = resp.Text
		}()
	}
	// Wait until the provider has its call and the others are waiting
	// on the lease, then answer.
	for calls.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	for _, c := range clients {
		for c.Stats().Requests == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	close(release)
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("the provider was called %d times for one span across 3 daemons", n)
	}
	for i, a := range answers {
		if a != "the summary" {
			t.Fatalf("daemon %d got %q", i, a)
		}
	}
}
