package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Crash-loop protection. Before the registry loads a file it writes a
// marker (StateDir/plugin-loads/<id>.json, id derived from the file's path)
// naming the file and the hash of its bytes, and removes it when the load
// is over, whatever its outcome. A marker that is still there when the
// next daemon starts means the last one died while loading those bytes (an
// OOM kill, a crash in the runtime): the file is quarantined
// (StateDir/quarantine/<id>.json) and not loaded again until its bytes
// change or it is removed from the directory, while every other plugin
// serves. GET /v1/policies and the log say so.
//
// Loads run in parallel at start, so a crash can leave several markers,
// and only one of them is to blame. A single leftover marker is
// quarantined at once; several leave their files under suspicion: they
// are loaded one at a time after the others, so that if one of them takes
// the daemon down again, its marker is the only one left and the next
// start quarantines it. Either way the daemon cannot crash-loop: every
// start either serves or narrows the suspects down to one.

// loadRecord is a marker's content, and a quarantine record's.
type loadRecord struct {
	File    string    `json:"file"`
	SHA256  string    `json:"sha256"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started_at"`
	// Found is when a start found the marker (quarantine records only).
	Found time.Time `json:"found_at,omitzero"`
}

const (
	markerDir     = "plugin-loads"
	quarantineDir = "quarantine"
)

// recordID names a file's marker and quarantine record.
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

func writeRecord(path string, rec loadRecord) error {
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

// recoverMarkers runs once, before the first load: it reads the
// quarantine records, and turns the markers a dead daemon left behind
// into a quarantine record (one marker) or suspects (several).
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
	quarantine := map[string]loadRecord{}
	if entries, err := os.ReadDir(qdir); err == nil {
		for _, e := range entries {
			if rec, err := readRecord(filepath.Join(qdir, e.Name())); err == nil {
				quarantine[rec.File] = rec
			}
		}
	}
	var left []loadRecord
	entries, _ := os.ReadDir(mdir)
	for _, e := range entries {
		p := filepath.Join(mdir, e.Name())
		if rec, err := readRecord(p); err == nil {
			left = append(left, rec)
		}
		os.Remove(p)
	}
	suspects := map[string]string{}
	now := time.Now()
	switch {
	case len(left) == 1:
		rec := left[0]
		rec.Found = now
		if err := writeRecord(filepath.Join(qdir, recordID(rec.File)+".json"), rec); err != nil {
			r.logger.Warn("writing a quarantine record", "error", err)
		}
		quarantine[rec.File] = rec
		r.logger.Error("the last compactd stopped while loading this plugin file: quarantined, the other plugins serve",
			"file", rec.File, "sha256", short(rec.SHA256), "pid", rec.PID, "load_started", rec.Started.Format(time.RFC3339))
	case len(left) > 1:
		var files []string
		for _, rec := range left {
			suspects[rec.File] = rec.SHA256
			files = append(files, filepath.Base(rec.File))
		}
		r.logger.Warn("the last compactd stopped while loading several plugin files at once; loading them one at a time to find the one to quarantine",
			"files", strings.Join(files, ", "))
	}
	r.mu.Lock()
	r.quarantine, r.suspects = quarantine, suspects
	r.mu.Unlock()
}

// beginLoad writes the marker of a load of path's bytes; the function it
// returns removes it.
func (r *Registry) beginLoad(path, hash string) (done func()) {
	if r.opts.StateDir == "" || r.markersOff {
		return func() {}
	}
	p := filepath.Join(r.opts.StateDir, markerDir, recordID(path)+".json")
	rec := loadRecord{File: path, SHA256: hash, PID: os.Getpid(), Started: time.Now()}
	if err := writeRecord(p, rec); err != nil {
		r.logger.Warn("writing a load marker (crash-loop protection)", "file", path, "error", err)
		return func() {}
	}
	return func() {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			r.logger.Warn("removing a load marker", "file", path, "error", err)
		}
	}
}

// quarantined returns the quarantine error of path's bytes, or nil. A
// record for other bytes is dropped: the file changed. The caller holds
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
	return fmt.Errorf("%w: compactd stopped while loading these bytes (sha256 %s, pid %d, %s); they are not loaded again until the file changes or is removed and put back",
		ErrQuarantined, short(hash), rec.PID, rec.Started.Format(time.RFC3339))
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

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}
