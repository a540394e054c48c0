package tokens

import (
	"strings"
	"sync"
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
	// each time.
	maxCachedPiece = 64
	// pieceGeneration is the entries of one generation: at most twice
	// this many pieces are held (a few MB).
	pieceGeneration = 1 << 15
	// dedupMisses is the number of unknown pieces in one text past which
	// they are first made unique, so a new text's repeated words are
	// counted once.
	dedupMisses = 16
)

// pieceCache remembers the token count of short pieces for one encoding.
// It evicts by generations like the message cache (cache.go): a piece
// found in the previous generation moves back into the current one, and
// a full current generation replaces the previous one whole. Readers of
// a text share the lock; the pieces a text did not find are counted
// outside it and stored under it once per text.
type pieceCache struct {
	// segments: the cache cuts a text into segments (segmentCut), not
	// pieces (cutAt); caseCuts: also between a lower-case ASCII letter
	// and a capital (o200k_base's split pattern, not cl100k_base's).
	segments, caseCuts bool
	// segs counts what this cache misses by its segments; nil: the
	// codec counts it whole.
	segs       *pieceCache
	mu         sync.RWMutex
	cur, prev  map[string]uint32
	generation int
}

// newPieceCache returns a cache of pieces, generation entries a
// generation, that counts the pieces it misses by their segments, in a
// cache of segments of the same bound.
func newPieceCache(generation int, caseCuts bool) *pieceCache {
	return &pieceCache{cur: make(map[string]uint32), generation: max(generation, 1), segs: newSegmentCache(generation, caseCuts)}
}

// newSegmentCache returns a cache of segments (cut between cases too with
// caseCuts) that counts the segments it misses with the codec.
func newSegmentCache(generation int, caseCuts bool) *pieceCache {
	return &pieceCache{segments: true, caseCuts: caseCuts, cur: make(map[string]uint32), generation: max(generation, 1)}
}

// span is a piece of a text that count did not find in the current
// generation: [start, end), with its count when the previous generation
// had it (found).
type span struct {
	start, end int
	n          uint32
	found      bool
}

// count returns the tokens of s, summing its pieces' counts; e counts a
// piece the cache does not hold.
func (p *pieceCache) count(s string, e *encoding) int {
	var buf [64]span
	misses := buf[:0]
	n := 0
	look := func(start, end int) {
		piece := s[start:end]
		if len(piece) <= maxCachedPiece {
			if c, ok := p.cur[piece]; ok {
				n += int(c)
				return
			}
			if c, ok := p.prev[piece]; ok {
				misses = append(misses, span{start: start, end: end, n: c, found: true})
				return
			}
		}
		misses = append(misses, span{start: start, end: end})
	}
	p.mu.RLock()
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
	p.mu.RUnlock()
	if len(misses) == 0 {
		return n
	}

	var seen map[string]uint32
	if len(misses) > dedupMisses {
		seen = make(map[string]uint32, len(misses))
	}
	store := false
	for i := range misses {
		m := &misses[i]
		piece := s[m.start:m.end]
		if !m.found {
			if c, ok := seen[piece]; ok {
				m.n = c
			} else {
				m.n = uint32(p.countMissed(piece, e))
				if seen != nil {
					seen[piece] = m.n
				}
			}
		}
		n += int(m.n)
		store = store || len(piece) <= maxCachedPiece
	}
	if !store {
		return n
	}
	p.mu.Lock()
	for _, m := range misses {
		piece := s[m.start:m.end]
		if len(piece) > maxCachedPiece {
			continue
		}
		if _, ok := p.cur[piece]; ok {
			continue // stored by another text meanwhile, or twice in this one
		}
		if m.found {
			delete(p.prev, piece)
		}
		p.insert(strings.Clone(piece), m.n)
	}
	p.mu.Unlock()
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

// insert adds a piece to the current generation, starting a new one when
// it is full. The caller holds the write lock.
func (p *pieceCache) insert(piece string, n uint32) {
	if len(p.cur) >= p.generation {
		p.prev, p.cur = p.cur, make(map[string]uint32, len(p.cur))
	}
	p.cur[piece] = n
}

// len returns the pieces held, both generations, segments included.
func (p *pieceCache) len() int {
	p.mu.RLock()
	n := len(p.cur) + len(p.prev)
	p.mu.RUnlock()
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
