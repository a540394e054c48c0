package tokens

import (
	"hash/maphash"
	"sync/atomic"
)

// Counting by pieces.
//
// tiktoken-go pre-splits a text with a regular expression (regexp2) and
// byte-pair encodes each piece: about 8–10 MB/s on agent traffic, so a
// 10 KB tool output took over a millisecond to count. Most of what a
// conversation holds are words it has held before (paths, names, the same
// code), so an encoding counts a text piece by piece and remembers each
// piece's count.
//
// A text is cut where both split patterns always end a piece (cutAt):
// before a single ASCII space between two printable ASCII characters
// ("a b", not "a  b"), and after the last line break of a whitespace run
// that goes on to a printable character. What the expression matches
// from a cut on depends only on the text from there (its one lookahead,
// (?!\S), sees the same at a cut as at the end of a text), and byte-pair
// encoding never crosses a piece, so the count of the text is the sum of
// its pieces' counts, exactly; the tests compare the two on every text of
// the fixtures and on texts built around each rule, and fuzz them.
//
// A piece the cache does not hold is counted by its segments, which a
// second cache remembers: a new piece is mostly made of parts seen before
// (" np.amax(x)" of " np", ".amax", "(x", ")"; a path of its directories),
// and a codec call costs about as much for a short string as for a long
// one (0.4 µs for " np" in a warm loop, 4 µs on average in the daemon).
// A piece is cut into segments at the end of a run of ASCII letters or
// digits followed by an ASCII byte of neither kind other than an
// apostrophe (segmentCut): a letter is matched only by the patterns' word
// alternatives and a digit only by \p{N}{1,3}, so the match holding the
// run's last byte ends with it, and the matches before it look no further.

// Bounds of the piece cache of one encoding.
const (
	// maxCachedPiece is the longest piece remembered: longer ones (a
	// base64 blob, a minified line) rarely come back and are counted
	// each time. A piece of at most 64 bytes has at most 64 tokens, so
	// its count fits in a slot's low byte.
	maxCachedPiece = 64
	// pieceSlots is the number of counts one table holds (pieces, or
	// segments): 8 bytes each, 512 KiB a table.
	pieceSlots = 1 << 16
	// dedupMisses is the number of unknown pieces in one text past which
	// they are first made unique, so a new text's repeated words are
	// counted once.
	dedupMisses = 16
)

// pieceCache remembers the token count of short pieces for one encoding,
// in a table of a fixed size: a 64-bit hash of a piece picks a bucket of
// eight slots (one cache line), and a slot holds the hash's upper 56 bits
// and the count. A lookup reads one bucket, and a new count takes an
// empty slot of its bucket or replaces the one its hash names. Slots are
// read and written atomically, so counting takes no lock; two texts may
// store the same piece twice, or one may replace the other's newer count,
// and either only costs a later miss. Two pieces share a count only on a
// collision of 56 bits of their hashes, as two messages share one in the
// message cache (cache.go) on a 64-bit collision. The table keeps no
// text: a bulky chunk of the daemon's heap is 512 KiB a table, always.
type pieceCache struct {
	// segments: the cache cuts a text into segments (segmentCut), not
	// pieces (cutAt); caseCuts: also between a lower-case ASCII letter
	// and a capital (o200k_base's split pattern, not cl100k_base's).
	segments, caseCuts bool
	// segs counts what this cache misses by its segments; nil: the
	// codec counts it whole.
	segs  *pieceCache
	seed  maphash.Seed
	slots []atomic.Uint64 // len(slots)/8 buckets of 8
	mask  uint64          // the number of buckets, minus 1
	held  atomic.Int64    // slots filled
}

// newPieceCache returns a cache of pieces of about slots counts that
// counts the pieces it misses by their segments, in a cache of segments
// of the same size.
func newPieceCache(slots int, caseCuts bool) *pieceCache {
	p := newSegmentCache(slots, caseCuts)
	p.segments, p.caseCuts = false, false
	p.segs = newSegmentCache(slots, caseCuts)
	return p
}

// newSegmentCache returns a cache of segments (cut between cases too with
// caseCuts) of about slots counts, a power of two and at least 8, that
// counts the segments it misses with the codec.
func newSegmentCache(slots int, caseCuts bool) *pieceCache {
	buckets := 1
	for buckets*8 < slots {
		buckets *= 2
	}
	return &pieceCache{segments: true, caseCuts: caseCuts, seed: maphash.MakeSeed(),
		slots: make([]atomic.Uint64, 8*buckets), mask: uint64(buckets - 1)}
}

// tagMask keeps the bits of a hash a slot holds; the low byte is the count.
const tagMask = ^uint64(0xFF)

// get returns the count held for hash h.
func (p *pieceCache) get(h uint64) (uint32, bool) {
	b := p.bucket(h)
	for i := range b {
		if v := b[i].Load(); v&tagMask == h&tagMask {
			return uint32(v & 0xFF), true
		}
	}
	return 0, false
}

// put holds count n for hash h: in an empty slot of its bucket, else in
// the one the hash's top bits name.
func (p *pieceCache) put(h uint64, n uint32) {
	v := h&tagMask | uint64(n)
	b := p.bucket(h)
	for i := range b {
		switch b[i].Load() & tagMask {
		case h & tagMask:
			return
		case 0:
			if b[i].CompareAndSwap(0, v) {
				p.held.Add(1)
				return
			}
		}
	}
	b[h>>61].Store(v)
}

// bucket returns the eight slots hash h may be held in.
func (p *pieceCache) bucket(h uint64) []atomic.Uint64 {
	i := 8 * ((h >> 8) & p.mask)
	return p.slots[i : i+8 : i+8]
}

// span is a piece of a text the cache does not hold: [start, end), its
// hash (0 for a piece too long to hold, or whose hash's upper 56 bits are
// all 0), and its count once counted.
type span struct {
	start, end int
	h          uint64
	n          uint32
}

// count returns the tokens of s, summing its pieces' counts; e counts a
// piece the cache does not hold.
func (p *pieceCache) count(s string, e *encoding) int {
	var buf [64]span
	misses := buf[:0]
	n := 0
	look := func(start, end int) {
		var h uint64
		if end-start <= maxCachedPiece {
			if h = maphash.String(p.seed, s[start:end]); h&tagMask == 0 {
				h = 0
			} else if c, ok := p.get(h); ok {
				n += int(c)
				return
			}
		}
		misses = append(misses, span{start: start, end: end, h: h})
	}
	start := 0
	if p.segments {
		for i := 1; i < len(s); i++ {
			if segmentCut(s, i, p.caseCuts) {
				look(start, i)
				start = i
			}
		}
	} else {
		for i := 1; i < len(s)-1; i++ {
			if c := s[i]; c != ' ' && c != '\n' && c != '\r' {
				continue
			}
			if cut := cutAt(s, i); cut > start {
				look(start, cut)
				start = cut
			}
		}
	}
	look(start, len(s))
	if len(misses) == 0 {
		return n
	}

	var seen map[uint64]uint32 // the counts of short pieces counted here
	if len(misses) > dedupMisses {
		seen = make(map[uint64]uint32, len(misses))
	}
	for i := range misses {
		m := &misses[i]
		if c, ok := seen[m.h]; ok && m.h != 0 {
			m.n = c
		} else {
			m.n = uint32(p.countMissed(s[m.start:m.end], e))
			if m.h != 0 {
				p.put(m.h, m.n)
				if seen != nil {
					seen[m.h] = m.n
				}
			}
		}
		n += int(m.n)
	}
	return n
}

// countMissed counts a piece the cache does not hold: by its segments, or
// whole with the codec.
func (p *pieceCache) countMissed(piece string, e *encoding) int {
	if p.segs != nil {
		return p.segs.count(piece, e)
	}
	return e.countWhole(piece)
}

// len returns the counts held, segments included.
func (p *pieceCache) len() int {
	n := int(p.held.Load())
	if p.segs != nil {
		n += p.segs.len()
	}
	return n
}

// cutAt returns where a piece ends at s[i] (0 < i < len(s)-1), or 0 when
// none does:
//   - i, when s[i] is a single space between two printable ASCII
//     characters: every alternative that can take the space starts with
//     it;
//   - i+1, when s[i] is the last line break of a run of whitespace that
//     goes on with spaces or tabs up to a printable ASCII character, or
//     s[i+1] is an ASCII letter or digit: the library's matcher ends a
//     piece at every line break of a run ("\n  \n  x" is "\n", "  \n",
//     " ", " x"), and a punctuation piece takes line breaks (and, in
//     o200k_base, slashes) after it but no space, tab, letter or digit.
func cutAt(s string, i int) int {
	switch s[i] {
	case ' ':
		if printable(s[i-1]) && printable(s[i+1]) {
			return i
		}
	case '\n', '\r':
		if alnum(s[i+1]) {
			return i + 1
		}
		j := i + 1
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		if j > i+1 && j < len(s) && printable(s[j]) {
			return i + 1
		}
	}
	return 0
}

// printable reports whether b is a printable ASCII character other than
// the space.
func printable(b byte) bool { return b > ' ' && b < 0x7f }

// alnum reports whether b is an ASCII letter or digit.
func alnum(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// segmentCut reports whether a piece is cut into segments before s[i]
// (0 < i < len(s)): s[i-1] ends a run of ASCII letters or digits, and
// s[i] is an ASCII byte that continues neither (for letters, nor a
// contraction's apostrophe). Every match of both split patterns ends
// there: a letter is matched only by a word alternative (an optional
// non-letter, letters, an optional contraction), a digit only by
// \p{N}{1,3}, and neither goes on past such a byte; no earlier match
// looks past the run. So the segments count alone as they do together.
//
// With caseCuts (o200k_base) a piece is also cut between a lower-case
// ASCII letter and a capital (getUser is get, User): o200k_base's word
// alternatives are capitals then lower-case letters (or capitals alone),
// so a match that reached a lower-case letter ends before a capital.
func segmentCut(s string, i int, caseCuts bool) bool {
	a, b := s[i-1], s[i]
	if b >= 0x80 {
		return false
	}
	switch {
	case asciiLetter(a):
		if caseCuts && a >= 'a' && b <= 'Z' && b >= 'A' {
			return true
		}
		return !asciiLetter(b) && b != '\''
	case a >= '0' && a <= '9':
		return b < '0' || b > '9'
	}
	return false
}

// asciiLetter reports whether b is an ASCII letter.
func asciiLetter(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }
