package main

// memoMap indexes the memo's entries by key: an open-addressing table
// with linear probing, whose keys' first words are hashes (fingerprints)
// and place them directly. In the guest, Go's map cost about a
// microsecond an operation (its hashing and probing are generic code,
// slow in Go's Wasm), and a fold made some ten; a probe here is a few
// comparisons. Deleting shifts the entries after a hole back, so there
// are no tombstones.
type memoMap struct {
	slots []memoMapSlot // len is 0 or a power of two, at most half full
	n     int
}

type memoMapSlot struct {
	key  [2]uint64
	used bool
	e    memoEntry
}

// home is where a key's probe starts.
func (m *memoMap) home(key [2]uint64) int { return int(key[0] & uint64(len(m.slots)-1)) }

// find returns the slot holding key, or -1.
func (m *memoMap) find(key [2]uint64) int {
	if len(m.slots) == 0 {
		return -1
	}
	mask := len(m.slots) - 1
	for i := m.home(key); ; i = (i + 1) & mask {
		switch s := &m.slots[i]; {
		case !s.used:
			return -1
		case s.key == key:
			return i
		}
	}
}

// get returns key's entry.
func (m *memoMap) get(key [2]uint64) (memoEntry, bool) {
	if i := m.find(key); i >= 0 {
		return m.slots[i].e, true
	}
	return memoEntry{}, false
}

// set holds e under key, replacing what key held.
func (m *memoMap) set(key [2]uint64, e memoEntry) {
	if 2*(m.n+1) > len(m.slots) {
		m.grow()
	}
	mask := len(m.slots) - 1
	for i := m.home(key); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if !s.used {
			*s = memoMapSlot{key: key, used: true, e: e}
			m.n++
			return
		}
		if s.key == key {
			s.e = e
			return
		}
	}
}

// del removes key and returns what it held.
func (m *memoMap) del(key [2]uint64) (memoEntry, bool) {
	i := m.find(key)
	if i < 0 {
		return memoEntry{}, false
	}
	e := m.slots[i].e
	mask := len(m.slots) - 1
	// Shift back each entry after the hole whose probe passed it, until
	// an empty slot: every key stays reachable from its home.
	for j := (i + 1) & mask; m.slots[j].used; j = (j + 1) & mask {
		k := m.home(m.slots[j].key)
		// The entry at j may fill the hole at i unless its home lies
		// cyclically in (i, j].
		if i <= j && (k <= i || k > j) || i > j && k <= i && k > j {
			m.slots[i] = m.slots[j]
			i = j
		}
	}
	m.slots[i] = memoMapSlot{}
	m.n--
	return e, true
}

// len returns the number of keys held.
func (m *memoMap) len() int { return m.n }

// grow doubles the table (64 slots at first) and places every key again.
func (m *memoMap) grow() {
	old := m.slots
	m.slots, m.n = make([]memoMapSlot, max(64, 2*len(old))), 0
	for _, s := range old {
		if s.used {
			m.set(s.key, s.e)
		}
	}
}
