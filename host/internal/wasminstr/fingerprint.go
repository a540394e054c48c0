package wasminstr

import (
	"crypto/sha256"
	"embed"
	"io/fs"
)

// source is this package's own source, which Fingerprint hashes.
//
//go:embed *.go
var source embed.FS

// Fingerprint identifies what Instrument and EntryLoops make of a module:
// a SHA-256 of this package's source files. Instrumented modules kept
// across runs (the host's cache of them) are keyed by it, so that any
// change to the instrumenter, however small, makes the modules it made
// before unreachable: nothing has to be remembered to be bumped.
func Fingerprint() [sha256.Size]byte {
	h := sha256.New()
	// fs.WalkDir visits the files in lexical order, so the sum is stable.
	_ = fs.WalkDir(source, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := source.ReadFile(path)
		if err != nil {
			return err
		}
		h.Write([]byte(path))
		h.Write([]byte{0})
		h.Write(b)
		h.Write([]byte{0})
		return nil
	})
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
