package host

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/compactd/compactd/abi"
)

// TestAffinityPrefersTheConversationsInstance: a call for a conversation
// takes the idle instance that last served it; a call for another, or
// one whose instance is busy, takes the idle instance that waited
// longest, at once (a preference never waits).
func TestAffinityPrefersTheConversationsInstance(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, false, Limits{})
	p := loadTestPlugin(t, e, "plugins/lastn/lastn.c", Limits{MaxInstances: 3})
	ctx := context.Background()

	var held []*pooled
	for range 3 {
		pi, err := p.acquire(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, pi)
	}
	x, y, z := held[0], held[1], held[2]
	if x.serial == y.serial || y.serial == z.serial || x.serial == z.serial {
		t.Fatalf("serials %d, %d, %d; want them distinct", x.serial, y.serial, z.serial)
	}
	p.release(ctx, x, "a", nil)
	p.release(ctx, y, "b", nil)
	p.release(ctx, z, "c", nil)

	take := func(conv string) *pooled {
		t.Helper()
		pi, err := p.acquire(ctx, conv)
		if err != nil {
			t.Fatal(err)
		}
		return pi
	}
	if got := take("b"); got != y {
		t.Errorf("conversation b got instance %d; want %d, the one that served it", got.serial, y.serial)
	} else {
		defer p.release(ctx, got, "b", nil)
	}
	if got := take("new"); got != x {
		t.Errorf("a new conversation got instance %d; want %d, the idle one that waited longest", got.serial, x.serial)
	} else {
		defer p.release(ctx, got, "new", nil)
	}
	// a's instance is busy (serving "new"): a takes the one left, not waiting.
	got := take("a")
	if got != z {
		t.Errorf("conversation a, its instance busy, got instance %d; want %d, the idle one", got.serial, z.serial)
	}
	p.release(ctx, got, "a", nil)
	if s := p.affinity["a"]; s != z.serial {
		t.Errorf("conversation a is remembered on instance %d; want %d, the one that served it last", s, z.serial)
	}
}

// TestAffinityForgetsBeyondItsCap: the plugin remembers at most
// maxAffinity conversations.
func TestAffinityForgetsBeyondItsCap(t *testing.T) {
	t.Parallel()
	p := &Plugin{}
	pi := &pooled{serial: 7}
	for i := range maxAffinity + 100 {
		p.rememberLocked(fmt.Sprint("conv-", i), pi)
	}
	if n := len(p.affinity); n != maxAffinity {
		t.Errorf("%d conversations remembered; want the cap, %d", n, maxAffinity)
	}
	p.rememberLocked("", pi)
	if _, ok := p.affinity[""]; ok {
		t.Error("a call without a conversation id was remembered")
	}
}

// TestAffinityUnderConcurrency runs many conversations' calls at once,
// one of them far busier than the rest: every call is served with the
// right answer, whichever instance it lands on (-race checks the pool).
func TestAffinityUnderConcurrency(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, false, Limits{})
	p := loadTestPlugin(t, e, "plugins/lastn/lastn.c", Limits{MaxInstances: 2})
	conv := testConversation(t)
	want, err := p.Compact(context.Background(), &Request{Conversation: conv, Config: json.RawMessage(`{"n":2}`)})
	if err != nil {
		t.Fatal(err)
	}
	before := p.Stats().Calls
	const workers, calls = 6, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*calls)
	for w := range workers {
		wg.Go(func() {
			for i := range calls {
				id := "hot" // worker 0 and half of every other's calls: one hot conversation
				if w > 0 && i%2 == 1 {
					id = fmt.Sprintf("conv-%d-%d", w, i%5)
				}
				resp, err := p.Compact(context.Background(), &Request{Conversation: conv, Config: json.RawMessage(`{"n":2}`),
					Context: abi.Context{ConversationID: id}})
				if err == nil && fmt.Sprint(resp.Refs) != fmt.Sprint(want.Refs) {
					err = fmt.Errorf("conversation %s: refs %v; want %v", id, resp.Refs, want.Refs)
				}
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if s := p.Stats(); s.Calls-before != workers*calls || s.Failures != 0 {
		t.Errorf("stats %+v; want %d more calls than %d, no failures", s, workers*calls, before)
	}
	p.mu.Lock()
	n := len(p.affinity)
	p.mu.Unlock()
	if want := 1 + 5*(workers-1); n != want {
		t.Errorf("%d conversations remembered; want %d (hot and five of every other worker)", n, want)
	}
}
