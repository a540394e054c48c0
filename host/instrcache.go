package host

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/compactd/compactd/host/internal/wasminstr"
	"github.com/hashicorp/go-hclog"
)

// The cache of instrumented modules (Config.CacheDir).
const (
	// instrCacheSubdir is the directory, under Config.CacheDir, that
	// holds instrumented modules.
	instrCacheSubdir = "instrumented"
	// instrCacheBytes bounds the directory: some 60 instrumented Go
	// plugins.
	instrCacheBytes = 256 << 20
	// instrMagic opens every entry; the digit is the entry format's.
	instrMagic = "cdinstr1"
	// instrHeader is the entry's fixed header: magic, key, flags,
	// loops, OutOfWork, module length.
	instrHeader = len(instrMagic) + sha256.Size + 1 + 8 + 4 + 8
	// instrTempPrefix names entries being written; one older than
	// instrTempAge was left by a process that died and is removed.
	instrTempPrefix = ".tmp-"
	instrTempAge    = time.Hour
)

// instrCache keeps instrumented modules on disk, so that a daemon start
// with unchanged plugins (and every test daemon) does not instrument them
// again: for a Go plugin of a few megabytes, instrumenting is a third of
// loading it (and more under the race detector). An entry is keyed by a
// hash of the original module, the instrumentation options and the
// instrumenter's own fingerprint (wasminstr.Fingerprint), and holds the
// instrumented module with a SHA-256 of the whole entry: an entry that
// is truncated, corrupt or not for this key is removed and the module
// instrumented again, never used. Entries are written to a temporary
// file and renamed, so a reader sees a whole entry or none; the
// directory is kept under its size bound by removing the least recently
// used entries after each write. A failure of the cache (an unwritable
// directory, a full disk) costs only the instrumentation it would have
// saved; it is logged at debug level.
//
// The cache is as trusted as wazero's compilation cache beside it, which
// holds machine code: whoever can write the cache directory can change
// what runs. Keep it the daemon's own.
type instrCache struct {
	dir         string
	maxBytes    int64
	fingerprint [sha256.Size]byte
	logger      hclog.Logger
	// hits and misses count lookups (tests read them); stores counts
	// entries written.
	hits, misses, stores atomic.Uint64
}

// newInstrCache returns a cache in dir (created when first written) of
// at most maxBytes.
func newInstrCache(dir string, maxBytes int64, logger hclog.Logger) *instrCache {
	return &instrCache{dir: dir, maxBytes: maxBytes, fingerprint: wasminstr.Fingerprint(), logger: logger}
}

// instrKey is the key of the module whose SHA-256 is sum, instrumented
// with opts and, if checked, with EntryLoops applied after.
func (c *instrCache) key(sum [sha256.Size]byte, opts wasminstr.Options, checked bool) [sha256.Size]byte {
	var b []byte
	b = append(b, "compactd instrumented module\x00"...)
	b = append(b, c.fingerprint[:]...)
	b = append(b, sum[:]...)
	b = binary.LittleEndian.AppendUint64(b, opts.CallBudget)
	b = binary.LittleEndian.AppendUint64(b, opts.StartBudget)
	b = append(b, boolByte(opts.KeepStart), boolByte(checked))
	return sha256.Sum256(b)
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// path is the file of key's entry.
func (c *instrCache) path(key [sha256.Size]byte) string {
	return filepath.Join(c.dir, hex.EncodeToString(key[:])+".wasm")
}

// get returns the entry of key: the module to run (code) and the
// Result of its instrumentation (whose Module is code). ok is false if there is none or it
// cannot be used; an unusable entry is removed.
func (c *instrCache) get(key [sha256.Size]byte, opts wasminstr.Options) (res *wasminstr.Result, code []byte, ok bool) {
	path := c.path(key)
	// ReadModuleFile: only a regular file, at its size, in one buffer.
	b, err := ReadModuleFile(path, c.maxBytes)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.logger.Debug("instrumented module cache: entry unreadable; instrumenting again", "path", path, "error", err)
			_ = os.Remove(path)
		}
		c.misses.Add(1)
		return nil, nil, false
	}
	res, err = decodeInstrEntry(b, key)
	if err != nil {
		c.logger.Debug("instrumented module cache: entry unusable, removed; instrumenting again", "path", path, "error", err)
		_ = os.Remove(path)
		c.misses.Add(1)
		return nil, nil, false
	}
	res.Options = opts
	c.hits.Add(1)
	// Used now: the last to be pruned.
	now := time.Now()
	_ = os.Chtimes(path, now, now)
	return res, res.Module, true
}

// put writes the entry of key: res, with code the module to run (res's
// module, with EntryLoops applied if the key says checked). Errors are
// logged, not returned: the cache only saves work.
func (c *instrCache) put(key [sha256.Size]byte, res *wasminstr.Result, code []byte) {
	if err := c.write(key, encodeInstrEntry(key, res, code)); err != nil {
		c.logger.Debug("instrumented module cache: entry not written", "dir", c.dir, "error", err)
		return
	}
	c.stores.Add(1)
	if err := c.prune(); err != nil {
		c.logger.Debug("instrumented module cache: pruning failed", "dir", c.dir, "error", err)
	}
}

// write writes entry as key's file, atomically.
func (c *instrCache) write(key [sha256.Size]byte, entry []byte) error {
	if int64(len(entry)) > c.maxBytes {
		return fmt.Errorf("an entry of %d bytes is over the cache's %d", len(entry), c.maxBytes)
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(c.dir, instrTempPrefix+"*")
	if err != nil {
		return err
	}
	_, err = f.Write(entry)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), c.path(key))
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// prune removes the least recently used entries until the directory
// holds at most maxBytes, and temporary files a dead writer left.
func (c *instrCache) prune() error {
	des, err := os.ReadDir(c.dir)
	if err != nil {
		return err
	}
	type entry struct {
		path string
		size int64
		used time.Time
	}
	var entries []entry
	var total int64
	for _, de := range des {
		info, err := de.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		path := filepath.Join(c.dir, de.Name())
		if strings.HasPrefix(de.Name(), instrTempPrefix) {
			if time.Since(info.ModTime()) > instrTempAge {
				_ = os.Remove(path)
			}
			continue
		}
		entries = append(entries, entry{path, info.Size(), info.ModTime()})
		total += info.Size()
	}
	slices.SortFunc(entries, func(a, b entry) int { return a.used.Compare(b.used) })
	for _, e := range entries {
		if total <= c.maxBytes {
			break
		}
		if err := os.Remove(e.path); err == nil || errors.Is(err, fs.ErrNotExist) {
			total -= e.size
		}
	}
	return nil
}

// encodeInstrEntry lays out an entry: the header, the module, and a
// SHA-256 of both.
func encodeInstrEntry(key [sha256.Size]byte, res *wasminstr.Result, code []byte) []byte {
	b := make([]byte, 0, instrHeader+len(code)+sha256.Size)
	b = append(b, instrMagic...)
	b = append(b, key[:]...)
	b = append(b, boolByte(res.HasStart))
	b = binary.LittleEndian.AppendUint64(b, uint64(res.Loops))
	b = binary.LittleEndian.AppendUint32(b, res.OutOfWork)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(code)))
	b = append(b, code...)
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// decodeInstrEntry checks an entry (its checksum, format, key and
// length) and returns what it holds. Module aliases b.
func decodeInstrEntry(b []byte, key [sha256.Size]byte) (*wasminstr.Result, error) {
	if len(b) < instrHeader+sha256.Size {
		return nil, fmt.Errorf("truncated: %d bytes", len(b))
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return nil, errors.New("checksum mismatch")
	}
	if string(body[:len(instrMagic)]) != instrMagic {
		return nil, errors.New("not an entry of this format")
	}
	p := body[len(instrMagic):]
	if !bytes.Equal(p[:sha256.Size], key[:]) {
		return nil, errors.New("an entry for another key")
	}
	p = p[sha256.Size:]
	res := &wasminstr.Result{HasStart: p[0] == 1}
	res.Loops = int(binary.LittleEndian.Uint64(p[1:]))
	res.OutOfWork = binary.LittleEndian.Uint32(p[9:])
	n := binary.LittleEndian.Uint64(p[13:])
	code := p[21:]
	if uint64(len(code)) != n {
		return nil, fmt.Errorf("module of %d bytes; the header says %d", len(code), n)
	}
	res.Module = code
	return res, nil
}
