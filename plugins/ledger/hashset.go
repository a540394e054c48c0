package main

// hashSet is a set of 64-bit hashes: what a ledger already lists. It is
// an open-addressing table (linear probing, at most half full) rather
// than a map[uint64]bool: in a Go guest a map's lookups and inserts cost
// several times more, and a chunk makes dozens of each.
type hashSet struct {
	slots   []uint64 // 0 marks an empty slot
	n       int      // hashes held, zero not counted
	hasZero bool     // whether the set holds the hash 0
	shift   uint     // 64 - log2(len(slots))
}

// newHashSet returns a set with room for n hashes before it grows.
func newHashSet(n int) *hashSet {
	size, shift := 16, uint(60)
	for size < 2*n {
		size, shift = size*2, shift-1
	}
	return &hashSet{slots: make([]uint64, size), shift: shift}
}

// slot is where the probe for h starts.
func (s *hashSet) slot(h uint64) int { return int((h * 0x9E3779B97F4A7C15) >> s.shift) }

// has reports whether s holds h.
func (s *hashSet) has(h uint64) bool {
	if h == 0 {
		return s.hasZero
	}
	mask := len(s.slots) - 1
	for i := s.slot(h); ; i = (i + 1) & mask {
		switch s.slots[i] {
		case h:
			return true
		case 0:
			return false
		}
	}
}

// add puts h in s and reports whether s did not hold it.
func (s *hashSet) add(h uint64) bool {
	if h == 0 {
		added := !s.hasZero
		s.hasZero = true
		return added
	}
	mask := len(s.slots) - 1
	for i := s.slot(h); ; i = (i + 1) & mask {
		switch s.slots[i] {
		case h:
			return false
		case 0:
			s.slots[i] = h
			s.n++
			if 2*s.n > len(s.slots) {
				s.grow()
			}
			return true
		}
	}
}

// grow doubles the table.
func (s *hashSet) grow() {
	old := s.slots
	s.slots, s.shift, s.n = make([]uint64, 2*len(old)), s.shift-1, 0
	for _, h := range old {
		if h != 0 {
			s.add(h)
		}
	}
}

// len returns how many hashes s holds.
func (s *hashSet) len() int {
	if s.hasZero {
		return s.n + 1
	}
	return s.n
}
