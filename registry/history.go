package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/host"
)

// What the registry learns about plugin bytes outlives the process (with
// Options.StateDir): StateDir/plugin-history/<sha256>.json holds, for the
// bytes with that hash,
//
//   - their load failure, with the limits they were loaded under and the
//     build of compactd that tried: the same bytes under the same limits
//     are not loaded again by the same build, at the next start either,
//     until Retry (a start is not held up, nor a core spent, by files known
//     to be bad). A load cut short (the daemon stopping) is not a failure.
//     A time limit's failure is kept too: new limits (a longer
//     call_timeout) are a new try, and so is Retry;
//   - whether this build of compactd compiled them without the process
//     dying: compiling them again is then ordinary work, not evidence
//     against the file (quarantine.go);
//   - how often the daemon died with their load or compile under way,
//     since it last got through one.
//
// Records not written for historyMaxAge are dropped at start.

const (
	historyDir    = "plugin-history"
	historyMaxAge = 30 * 24 * time.Hour
)

// record is what is known of one module's bytes.
type record struct {
	SHA256 string `json:"sha256"`
	// File is the last file seen with these bytes.
	File string `json:"file,omitempty"`
	// CompiledBy is the build (compilerID) that compiled the bytes and
	// lived.
	CompiledBy string `json:"compiled_by,omitempty"`
	// Crashes counts the daemons that died with a load or compile of the
	// bytes under way, since one last got through.
	Crashes   int       `json:"crashes,omitempty"`
	CrashedAt time.Time `json:"crashed_at,omitzero"`
	// Failure is the bytes' load failure.
	Failure *failure `json:"failure,omitempty"`
}

// failure is a load failure kept across restarts.
type failure struct {
	Error string    `json:"error"`
	At    time.Time `json:"at"`
	// Limits are the limits the bytes were loaded under (those of the
	// file's base name).
	Limits host.Limits `json:"limits"`
	// By is the build that tried (compilerID).
	By string `json:"by"`
}

func (rec *record) empty() bool {
	return rec.CompiledBy == "" && rec.Crashes == 0 && rec.Failure == nil
}

// compilerID names this build of compactd: a record of what it did with
// some bytes (compiled them, failed to load them) holds for the same
// build; another one tries again.
func compilerID() string {
	id := "abi " + abi.Version.String()
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return id
	}
	id += " " + bi.Main.Path + "@" + bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" || s.Key == "vcs.modified" {
			id += " " + s.Key + "=" + s.Value
		}
	}
	for _, d := range bi.Deps {
		if d.Path == "github.com/tetratelabs/wazero" || d.Path == "github.com/extism/go-sdk" {
			id += " " + d.Path + "@" + d.Version
		}
	}
	return id
}

func (r *Registry) historyPath(hash string) string {
	return filepath.Join(r.opts.StateDir, historyDir, hash+".json")
}

// historyLocked returns the record of hash (nil if there is none). The
// caller holds histMu.
func (r *Registry) historyLocked(hash string) *record {
	if r.opts.StateDir == "" {
		return nil
	}
	if rec, ok := r.history[hash]; ok {
		return rec
	}
	var rec *record
	if b, err := os.ReadFile(r.historyPath(hash)); err == nil {
		var got record
		if json.Unmarshal(b, &got) == nil && got.SHA256 == hash {
			rec = &got
		}
	}
	r.history[hash] = rec
	return rec
}

// updateHistory applies f to hash's record (a new one if there is none)
// and writes it if f reports a change.
func (r *Registry) updateHistory(hash string, f func(*record) bool) {
	if r.opts.StateDir == "" {
		return
	}
	r.histMu.Lock()
	defer r.histMu.Unlock()
	rec := r.historyLocked(hash)
	next := record{SHA256: hash}
	if rec != nil {
		next = *rec
	}
	if !f(&next) {
		return
	}
	r.history[hash] = &next
	if err := r.writeHistory(&next); err != nil {
		r.logger.Warn("writing what is known of a plugin's bytes", "sha256", short(hash), "error", err)
	}
}

func (r *Registry) writeHistory(rec *record) error {
	p := r.historyPath(rec.SHA256)
	if rec.empty() {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// pruneHistory drops the records not written for historyMaxAge.
func (r *Registry) pruneHistory() {
	dir := filepath.Join(r.opts.StateDir, historyDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if st, err := e.Info(); err == nil && time.Since(st.ModTime()) > historyMaxAge {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// compiledBefore reports whether this build compiled hash's bytes before
// and lived.
func (r *Registry) compiledBefore(hash string) bool {
	r.histMu.Lock()
	defer r.histMu.Unlock()
	rec := r.historyLocked(hash)
	return rec != nil && rec.CompiledBy == r.compiler
}

// markCompiled records that this build compiled hash's bytes and lived.
func (r *Registry) markCompiled(hash string) {
	r.updateHistory(hash, func(rec *record) bool {
		if rec.CompiledBy == r.compiler {
			return false
		}
		rec.CompiledBy = r.compiler
		return true
	})
}

// survived records that a load or compile of hash's bytes ended with the
// process alive.
func (r *Registry) survived(hash string) {
	r.updateHistory(hash, func(rec *record) bool {
		if rec.Crashes == 0 {
			return false
		}
		rec.Crashes, rec.CrashedAt = 0, time.Time{}
		return true
	})
}

// rememberFailure keeps a load failure of hash's bytes for the next
// starts, unless it was cut short.
func (r *Registry) rememberFailure(path, hash string, limits host.Limits, err error) {
	if errors.Is(err, host.ErrCanceled) || errors.Is(err, context.Canceled) {
		return
	}
	if errors.Is(err, host.ErrCompileBudget) || errors.Is(err, host.ErrMemoryBudget) {
		// Checked again in milliseconds (nothing compiles), and decided
		// by daemon-wide budgets the record is not keyed on: a larger
		// budget must load the file without a retry by hand.
		return
	}
	r.updateHistory(hash, func(rec *record) bool {
		rec.File = path
		rec.Failure = &failure{Error: err.Error(), At: time.Now().UTC(), Limits: limits, By: r.compiler}
		return true
	})
}

// failedBefore returns the error of an earlier daemon's failure to load
// hash's bytes (in path) under limits (nil if there is none, or it was
// another build's, or under other limits).
func (r *Registry) failedBefore(path, hash string, limits host.Limits) error {
	r.histMu.Lock()
	rec := r.historyLocked(hash)
	r.histMu.Unlock()
	if rec == nil || rec.Failure == nil || rec.Failure.By != r.compiler || rec.Failure.Limits != limits {
		return nil
	}
	f := rec.Failure
	return fmt.Errorf("%s [these bytes %w, at %s, and are not tried again until they change: %s]",
		f.Error, ErrFailedBefore, f.At.Format(time.RFC3339), retryHint(path))
}

// forgetFailure drops what keeps hash's bytes from loading: their
// failure and their crash count.
func (r *Registry) forgetFailure(hash string) {
	r.updateHistory(hash, func(rec *record) bool {
		if rec.Failure == nil && rec.Crashes == 0 {
			return false
		}
		rec.Failure, rec.Crashes, rec.CrashedAt = nil, 0, time.Time{}
		return true
	})
}

// retryHint says how to load a file again by hand.
func retryHint(path string) string {
	name := strings.TrimSuffix(filepath.Base(path), ".wasm")
	return fmt.Sprintf("`compactd plugins retry %s` (POST /v1/policies/%s/retry) loads it again", name, name)
}
