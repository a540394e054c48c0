package host

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
	"time"
)

// TestReadModuleFile: only regular files are read, directly or through
// symlinks; anything else is refused at once, saying what it is, and
// nothing waits on a FIFO that has no writer.
func TestReadModuleFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	if err := os.WriteFile(path("ok.wasm"), []byte("\x00asm"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path("fifo.wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", path("sock.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	os.Mkdir(path("dir.wasm"), 0o755)
	os.Symlink("fifo.wasm", path("to-fifo.wasm"))
	os.Symlink("/dev/null", path("null.wasm"))
	os.Symlink("ok.wasm", path("to-ok.wasm"))
	os.Symlink("missing.wasm", path("dangling.wasm"))

	tests := []struct {
		name, want string
		err        error
	}{
		{"ok.wasm", "", nil},
		{"to-ok.wasm", "", nil},
		{"fifo.wasm", "fifo.wasm is a FIFO (named pipe); only regular files (or symlinks to them) are loaded", ErrNotRegularFile},
		{"to-fifo.wasm", "to-fifo.wasm is a symlink to a FIFO (named pipe)", ErrNotRegularFile},
		{"sock.wasm", "sock.wasm is a socket", ErrNotRegularFile},
		{"dir.wasm", "dir.wasm is a directory", ErrNotRegularFile},
		{"null.wasm", "null.wasm is a symlink to a character device", ErrNotRegularFile},
		{"dangling.wasm", "no such file or directory", os.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan struct{})
			var b []byte
			var err error
			go func() {
				defer close(done)
				b, err = ReadModuleFile(path(tt.name), 1<<20)
			}()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatal("ReadModuleFile is blocked")
			}
			if tt.err == nil {
				if err != nil || string(b) != "\x00asm" {
					t.Fatalf("read %q, %v", b, err)
				}
				return
			}
			if !errors.Is(err, tt.err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v; want %v containing %q", err, tt.err, tt.want)
			}
		})
	}

	// A FIFO put in the place of a file after the look and before the
	// open is refused by the check on the opened descriptor, at once.
	if _, _, err := openRegular(path("fifo.wasm")); !errors.Is(err, ErrNotRegularFile) || !strings.Contains(err.Error(), "is a FIFO") {
		t.Errorf("opening a FIFO: %v", err)
	}
	if f, st, err := openRegular(path("to-ok.wasm")); err != nil || st.Size() != 4 {
		t.Errorf("opening a regular file: %v", err)
	} else {
		f.Close()
	}

	// Over the limit: refused unread, with the sizes.
	if _, err := ReadModuleFile(path("ok.wasm"), 3); !errors.Is(err, ErrFileTooLarge) || !strings.Contains(err.Error(), "ok.wasm is 4 bytes; the limit is 3") {
		t.Errorf("over the limit: %v", err)
	}
}

// TestReadSized: a module file is read into one buffer of the size it
// had when it was looked at; one that changed size since is read whole
// all the same, up to one byte past the limit (which the caller refuses).
func TestReadSized(t *testing.T) {
	t.Parallel()
	data := []byte(strings.Repeat("0123456789", 10)) // 100 bytes now
	tests := []struct {
		name      string
		size, max int64 // the size when looked at, the limit
		want      int   // bytes read
	}{
		{"unchanged", 100, 1000, 100},
		{"at the limit", 100, 100, 100},
		{"shrank", 150, 1000, 100},
		{"empty now", 150, 1000, 0},
		{"grew", 40, 1000, 100},
		{"grew past the limit", 40, 60, 61},
		{"was empty", 0, 1000, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := data
			if tt.name == "empty now" {
				src = nil
			}
			b, err := readSized(bytes.NewReader(src), tt.size, tt.max)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != tt.want || !bytes.Equal(b, src[:tt.want]) {
				t.Errorf("read %d bytes %q; want the first %d", len(b), b, tt.want)
			}
		})
	}
	// A read error is returned, not a short module.
	if _, err := readSized(iotest.ErrReader(errors.New("disk on fire")), 100, 1000); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("read error: %v", err)
	}
}
