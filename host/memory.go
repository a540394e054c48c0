package host

import (
	"sync"

	"github.com/tetratelabs/wazero/experimental"
)

// memoryTracker backs every linear memory of one instance (the plugin's and,
// on the Extism path, the Extism kernel's). It enforces the memory limit
// itself, so it knows when a plugin asked for more than it may have, which
// wazero's own limit does not report; and it knows each memory's size,
// which Extism's API does not expose.
type memoryTracker struct {
	limit uint64 // bytes per memory

	mu       sync.Mutex
	memories []*trackedMemory
	refused  bool // a memory asked to grow past the limit
}

var _ experimental.MemoryAllocator = (*memoryTracker)(nil)

func newMemoryTracker(maxPages uint32) *memoryTracker {
	return &memoryTracker{limit: uint64(maxPages) << 16}
}

// Allocate implements experimental.MemoryAllocator.
func (t *memoryTracker) Allocate(capacity, max uint64) experimental.LinearMemory {
	m := &trackedMemory{tracker: t, buf: make([]byte, 0, min(capacity, t.limit))}
	t.mu.Lock()
	t.memories = append(t.memories, m)
	t.mu.Unlock()
	return m
}

// bytes returns the total size of the instance's memories.
func (t *memoryTracker) bytes() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var n uint64
	for _, m := range t.memories {
		n += uint64(len(m.buf))
	}
	return n
}

// takeRefused reports whether a growth was refused since the last call,
// and clears the flag.
func (t *memoryTracker) takeRefused() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.refused
	t.refused = false
	return r
}

type trackedMemory struct {
	tracker *memoryTracker
	buf     []byte
}

// Reallocate implements experimental.LinearMemory. Growth doubles the
// capacity (up to the limit) so a memory growing page by page is copied
// O(log n) times, as wazero's own allocator does.
func (m *trackedMemory) Reallocate(size uint64) []byte {
	t := m.tracker
	if size > t.limit {
		t.mu.Lock()
		t.refused = true
		t.mu.Unlock()
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
		return m.buf
	}
	newCap := min(max(size, 2*uint64(cap(m.buf))), t.limit)
	grown := make([]byte, size, newCap)
	copy(grown, m.buf)
	m.buf = grown
	return m.buf
}

// Free implements experimental.LinearMemory.
func (m *trackedMemory) Free() {
	m.tracker.mu.Lock()
	m.buf = nil
	m.tracker.mu.Unlock()
}
