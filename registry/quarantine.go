package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Crash-loop protection. Around work whose failure could be a plugin's
// the registry writes a marker (StateDir/plugin-loads/<id>-<pid>-<n>.json)
// naming the file, the hash of its bytes and the kind of work, and removes
// it when the work is over, whatever its outcome. That work is a load of
// new bytes (compiling them, running their start section, describe and
// the smoke test), and the first compile of bytes by this build of
// compactd; compiling bytes it compiled before (a lazy plugin's first
// call after a restart, a compile after an idle unload) is ordinary work
// and writes none, and neither does serving bytes from their cached
// description.
//
// A marker still there when the next daemon starts means the last one
// died with that work under way. It is weighed as evidence (each
// leftover marker also counts a crash against its bytes, history.go):
//
//   - a load with no other plugin work under way: the file is
//     quarantined (StateDir/quarantine/<id>.json) and not loaded again
//     until its bytes change, it is removed and put back, or Retry lifts
//     it, while every other plugin serves;
//   - a compile with nothing else under way quarantines only bytes that
//     crashed the daemon before: one kill -9 while a built-in compiles on
//     first use (an OOM kill elsewhere, a crashed host) is not the
//     plugin's doing, and does not disable it. The file is loaded and
//     compiled at the next start alone, after the others: if the daemon
//     dies again, that is twice, alone;
//   - several files under way say nothing of which was to blame: they are
//     loaded one at a time after the others, so that a second crash
//     leaves one marker.
//
// A daemon that was told it is stopping (Stopping: a shutdown has begun)
// and then killed (a service manager's stop timeout) leaves markers that
// are not held against anyone. Either way the daemon cannot crash-loop:
// every start either serves or narrows the suspects down to one.

// loadRecord is a marker's content, and a quarantine record's.
type loadRecord struct {
	File   string `json:"file"`
	SHA256 string `json:"sha256"`
	// Kind is the work under way: kindLoad ("" in older records) or
	// kindCompile.
	Kind    string    `json:"kind,omitempty"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started_at"`
	// Quarantine records only: when a start found the marker, why it
	// quarantined the file, and the policy its bytes describe (when the
	// description is cached).
	Found  time.Time `json:"found_at,omitzero"`
	Reason string    `json:"reason,omitempty"`
	Name   string    `json:"name,omitempty"`
}

// Kinds of work a marker covers.
const (
	kindLoad    = "load"
	kindCompile = "compile"
)

const (
	markerDir     = "plugin-loads"
	quarantineDir = "quarantine"
	// stoppingNote, in markerDir, says the daemon of its pid was stopping.
	stoppingNote = "stopping"
)

// Why a file is quarantined (loadRecord.Reason).
const (
	reasonLoad    = "compactd stopped while loading these bytes, with no other plugin load under way"
	reasonCompile = "compactd stopped twice while compiling these bytes, the second time with nothing else under way"
)

// recordID names a file's quarantine record, and starts its markers'
// names.
func recordID(path string) string {
	sum := sha256.Sum256([]byte(path))
	return hex.EncodeToString(sum[:8])
}

func readRecord(path string) (loadRecord, error) {
	var rec loadRecord
	b, err := os.ReadFile(path)
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.File == "" || rec.SHA256 == "" {
		return rec, fmt.Errorf("%s is not a load record", path)
	}
	return rec, nil
}

func writeRecord(path string, rec any) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// stopping is the content of the stopping note.
type stopping struct {
	PID int       `json:"pid"`
	At  time.Time `json:"at"`
}

// recoverMarkers runs once, before the first load: it reads the
// quarantine records, and weighs the markers a dead daemon left behind
// (see above): a quarantine record, or suspects.
func (r *Registry) recoverMarkers() {
	if r.opts.StateDir == "" {
		return
	}
	mdir := filepath.Join(r.opts.StateDir, markerDir)
	qdir := filepath.Join(r.opts.StateDir, quarantineDir)
	for _, d := range []string{mdir, qdir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			r.logger.Warn("crash-loop protection is off: cannot create its directory", "dir", d, "error", err)
			r.markersOff = true
			return
		}
	}
	r.pruneHistory()
	quarantine := map[string]loadRecord{}
	if entries, err := os.ReadDir(qdir); err == nil {
		for _, e := range entries {
			if rec, err := readRecord(filepath.Join(qdir, e.Name())); err == nil {
				quarantine[rec.File] = rec
			}
		}
	}
	var stop stopping
	if b, err := os.ReadFile(filepath.Join(mdir, stoppingNote)); err == nil {
		json.Unmarshal(b, &stop)
	}
	var left, excused []loadRecord
	entries, _ := os.ReadDir(mdir)
	for _, e := range entries {
		p := filepath.Join(mdir, e.Name())
		if e.Name() != stoppingNote {
			if rec, err := readRecord(p); err == nil {
				if stop.PID != 0 && rec.PID == stop.PID {
					excused = append(excused, rec)
				} else {
					left = append(left, rec)
				}
			}
		}
		os.Remove(p)
	}
	if len(excused) > 0 {
		r.logger.Warn("the last compactd was killed after it began to stop, with plugin work under way; that is not held against the files",
			"files", baseNames(excused), "pid", stop.PID)
	}

	// Each file under way when the daemon died counts a crash against
	// its bytes.
	now := time.Now()
	files := map[string]loadRecord{} // by file; a load outweighs a compile
	crashes := map[string]int{}
	for _, rec := range left {
		if rec.Kind == "" {
			rec.Kind = kindLoad
		}
		if prev, ok := files[rec.File]; !ok || prev.Kind == kindCompile {
			files[rec.File] = rec
		}
	}
	for _, rec := range files {
		r.updateHistory(rec.SHA256, func(h *record) bool {
			h.File, h.Crashes, h.CrashedAt = rec.File, h.Crashes+1, now
			crashes[rec.File] = h.Crashes
			return true
		})
	}
	suspects := map[string]string{}
	var one loadRecord
	for _, rec := range files {
		one = rec
	}
	switch {
	case len(files) == 1 && (one.Kind == kindLoad || crashes[one.File] >= 2):
		rec := one
		rec.Found, rec.Reason = now, reasonLoad
		if rec.Kind == kindCompile {
			rec.Reason = reasonCompile
		}
		if d := r.lookupDescribed(rec.SHA256); d != nil {
			rec.Name = d.Name
		}
		if err := writeRecord(filepath.Join(qdir, recordID(rec.File)+".json"), rec); err != nil {
			r.logger.Warn("writing a quarantine record", "error", err)
		}
		quarantine[rec.File] = rec
		r.logger.Error("the last compactd stopped while loading this plugin file: quarantined, the other plugins serve",
			"file", rec.File, "sha256", short(rec.SHA256), "pid", rec.PID, "work", rec.Kind, "crashes", crashes[rec.File],
			"started", rec.Started.Format(time.RFC3339), "retry", retryHint(rec.File))
	case len(files) == 1:
		suspects[one.File] = one.SHA256
		r.logger.Warn("the last compactd stopped while compiling this plugin file, with nothing else under way; one crash while compiling is not held against a file: it is compiled again, alone, after the other plugins have loaded, and quarantined if the daemon dies again",
			"file", one.File, "sha256", short(one.SHA256), "pid", one.PID, "started", one.Started.Format(time.RFC3339))
	case len(files) > 1:
		for _, rec := range files {
			suspects[rec.File] = rec.SHA256
		}
		r.logger.Warn("the last compactd stopped while loading several plugin files at once; loading them one at a time to find the one to quarantine",
			"files", baseNames(left))
	}
	r.mu.Lock()
	r.quarantine, r.suspects = quarantine, suspects
	r.mu.Unlock()
}

// baseNames lists the records' files by base name, sorted, once each.
func baseNames(recs []loadRecord) string {
	seen := map[string]bool{}
	var names []string
	for _, rec := range recs {
		if b := filepath.Base(rec.File); !seen[b] {
			seen[b] = true
			names = append(names, b)
		}
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// beginWork writes the marker of work of kind on path's bytes; the
// function it returns removes it and records that the process lived
// through the work.
func (r *Registry) beginWork(path, hash, kind string) (done func()) {
	if r.opts.StateDir == "" || r.markersOff {
		return func() {}
	}
	p := filepath.Join(r.opts.StateDir, markerDir, fmt.Sprintf("%s-%d-%d.json", recordID(path), os.Getpid(), r.markerSeq.Add(1)))
	rec := loadRecord{File: path, SHA256: hash, Kind: kind, PID: os.Getpid(), Started: time.Now()}
	if err := writeRecord(p, rec); err != nil {
		r.logger.Warn("writing a load marker (crash-loop protection)", "file", path, "error", err)
		return func() {}
	}
	var once bool
	return func() {
		if once {
			return
		}
		once = true
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			r.logger.Warn("removing a load marker", "file", path, "error", err)
		}
		r.survived(hash)
	}
}

// compiling returns the host's hook for the compiles of path's bytes
// after their load (host.LoadOptions.Compiling): the first compile of the
// bytes by this build is marked; later ones are ordinary work.
func (r *Registry) compiling(path, hash string) func() (done func()) {
	return func() func() {
		if r.compiledBefore(hash) {
			return nil
		}
		done := r.beginWork(path, hash, kindCompile)
		return func() {
			done()
			r.markCompiled(hash)
		}
	}
}

// Stopping tells the registry that the process is about to stop: a kill
// from now on (a service manager's stop timeout) leaves load markers that
// the next start does not hold against their files. The daemon calls it
// when its shutdown begins; Close calls it too.
func (r *Registry) Stopping() {
	if r.opts.StateDir == "" || r.markersOff {
		return
	}
	r.stoppingOnce.Do(func() {
		p := filepath.Join(r.opts.StateDir, markerDir, stoppingNote)
		if err := writeRecord(p, stopping{PID: os.Getpid(), At: time.Now()}); err != nil {
			r.logger.Warn("writing the stopping note (crash-loop protection)", "error", err)
		}
	})
}

// quarantinedLocked returns the quarantine error of path's bytes, or nil.
// A record for other bytes is dropped: the file changed. The caller holds
// r.mu.
func (r *Registry) quarantinedLocked(path, hash string) error {
	rec, ok := r.quarantine[path]
	if !ok {
		return nil
	}
	if rec.SHA256 != hash {
		r.forgetLocked(path)
		return nil
	}
	return quarantineError(rec)
}

func quarantineError(rec loadRecord) error {
	reason := rec.Reason
	if reason == "" {
		reason = reasonLoad
	}
	return fmt.Errorf("%w: %s (sha256 %s, pid %d, %s); they are not loaded again until the file changes, or is removed and put back, or by hand: %s",
		ErrQuarantined, reason, short(rec.SHA256), rec.PID, rec.Started.Format(time.RFC3339), retryHint(rec.File))
}

// forgetLocked drops path's quarantine record. The caller holds r.mu.
func (r *Registry) forgetLocked(path string) {
	if _, ok := r.quarantine[path]; !ok {
		return
	}
	delete(r.quarantine, path)
	if err := os.Remove(filepath.Join(r.opts.StateDir, quarantineDir, recordID(path)+".json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.logger.Warn("removing a quarantine record", "file", path, "error", err)
	}
	r.logger.Info("plugin file out of quarantine", "file", path)
}

// Retry loads a plugin file again now, lifting whatever keeps it from
// loading: its quarantine, the failure of its bytes (remembered from an
// earlier daemon, or this one's), a suspicion. name is a policy (the one
// the file serves, or that its bytes describe), a file of the directory
// (NAME.wasm, or NAME), or a file's path. Retry returns the file's state
// once the load is over; if ctx ends first it returns the state then,
// with ctx's error, and the load goes on. It fails with an error wrapping
// ErrUnknownPolicy when nothing matches name.
func (r *Registry) Retry(ctx context.Context, name string) (Info, error) {
	path, ok := r.fileFor(name)
	if !ok {
		return Info{}, fmt.Errorf("%w %q: no plugin file serves it or describes it, and there is no %s in %s",
			ErrUnknownPolicy, name, strings.TrimSuffix(name, ".wasm")+".wasm", r.opts.Dir)
	}
	r.mu.Lock()
	var hashes []string
	if q, ok := r.quarantine[path]; ok {
		hashes = append(hashes, q.SHA256)
	}
	r.forgetLocked(path)
	delete(r.suspects, path)
	if fs := r.byFile[path]; fs != nil && fs.err != nil {
		hashes = append(hashes, fs.errHash)
		fs.err, fs.errHash, fs.conflict = nil, "", ""
	}
	r.mu.Unlock()
	for _, h := range hashes {
		if h != "" {
			r.forgetFailure(h)
		}
	}
	r.logger.Info("plugin file retried by hand", "file", path, "asked_for", name)
	err := wait(ctx, []<-chan struct{}{r.schedule(path, true)})
	for _, in := range r.Policies() {
		if in.File == path {
			return in, err
		}
	}
	return Info{File: path}, err
}

// fileFor finds the file name stands for (see Retry).
func (r *Registry) fileFor(name string) (string, bool) {
	r.mu.RLock()
	var described []string
	for path, fs := range r.byFile {
		if fs.name == name {
			r.mu.RUnlock()
			return path, true
		}
		if fs.described == name {
			described = append(described, path)
		}
	}
	for path, q := range r.quarantine {
		if q.Name == name {
			described = append(described, path)
		}
	}
	_, known := r.byFile[name]
	r.mu.RUnlock()
	if len(described) > 0 {
		sort.Strings(described)
		return described[0], true
	}
	if known {
		return name, true
	}
	if base := filepath.Base(name); base == name && !strings.HasPrefix(base, ".") {
		path := filepath.Join(r.opts.Dir, strings.TrimSuffix(base, ".wasm")+".wasm")
		if _, err := os.Lstat(path); err == nil {
			return path, true
		}
	}
	return "", false
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}
