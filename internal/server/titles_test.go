package server

import (
	"fmt"
	"testing"
)

// TestTitleCache: a conversation's title is derived once, later requests
// get the same one; the cache stays within maxTitles conversations; a
// request without a conversation id derives its own.
func TestTitleCache(t *testing.T) {
	t.Parallel()
	var c titleCache
	derived := map[string]int{}
	get := func(id, title string) string {
		return c.get(id, func() string { derived[id]++; return title })
	}
	if got := get("a", "first task"); got != "first task" {
		t.Fatalf("title %q", got)
	}
	if got := get("a", "another task"); got != "first task" || derived["a"] != 1 {
		t.Fatalf("second request: title %q, derived %d times; want the first, once", got, derived["a"])
	}
	if get("", "x") != "x" || get("", "y") != "y" || derived[""] != 2 {
		t.Fatalf("no conversation id: derived %d times; want every time", derived[""])
	}
	for i := range 3 * maxTitles {
		get(fmt.Sprint(i), "t")
	}
	if n := len(c.titles); n > maxTitles {
		t.Fatalf("the cache holds %d conversations; the bound is %d", n, maxTitles)
	}
}
