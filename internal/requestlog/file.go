package requestlog

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
)

// File is a JSON-lines access file rotated by size: when a record would
// take it past MaxBytes, path.N-1 becomes path.N, …, path becomes path.1,
// and a new path is started; Keep rotated files are kept. (Rotation by
// rename, written here: lumberjack would add time-based names and
// compression nobody asked for; see RATIONALE.md.)
type File struct {
	path     string
	maxBytes int64
	keep     int

	mu     sync.Mutex
	f      *os.File // nil after a failed rotation (reopened on the next Write) or Close
	size   int64
	closed bool
}

// OpenFile opens (appends to) the access file at path. maxBytes <= 0
// never rotates; keep < 1 keeps one rotated file.
func OpenFile(path string, maxBytes int64, keep int) (*File, error) {
	if keep < 1 {
		keep = 1
	}
	l := &File{path: path, maxBytes: maxBytes, keep: keep}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *File) open() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("access log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("access log: %w", err)
	}
	l.f, l.size = f, st.Size()
	return nil
}

// Write appends r as one line.
func (l *File) Write(r *Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("access log: %w", err)
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("access log %s: closed", l.path)
	}
	if l.f == nil {
		if err := l.open(); err != nil {
			return err
		}
	}
	if l.maxBytes > 0 && l.size > 0 && l.size+int64(len(b)) > l.maxBytes {
		if err := l.rotate(); err != nil {
			return err
		}
	}
	n, err := l.f.Write(b)
	l.size += int64(n)
	if err != nil {
		return fmt.Errorf("access log: %w", err)
	}
	return nil
}

// rotate shifts the files by one and starts a new one (l.mu held).
func (l *File) rotate() error {
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("access log: %w", err)
	}
	l.f = nil
	os.Remove(fmt.Sprintf("%s.%d", l.path, l.keep))
	for i := l.keep - 1; i >= 1; i-- {
		if err := os.Rename(fmt.Sprintf("%s.%d", l.path, i), fmt.Sprintf("%s.%d", l.path, i+1)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("access log: rotating: %w", err)
		}
	}
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		return fmt.Errorf("access log: rotating: %w", err)
	}
	return l.open()
}

// Close closes the file.
func (l *File) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
