package host

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Errors of ReadModuleFile. Test with errors.Is.
var (
	// ErrNotRegularFile: the path (or what its symlinks lead to) is a
	// FIFO, a device, a socket or a directory, not a regular file.
	ErrNotRegularFile = errors.New("not a regular file")
	// ErrFileTooLarge: the file is over the size it may have.
	ErrFileTooLarge = errors.New("plugin file too large")
)

// ReadModuleFile reads the module file at path, of at most maxBytes
// bytes. Only a regular file is read, directly or through symlinks: a
// FIFO, a device, a socket or a directory is refused with an error
// wrapping ErrNotRegularFile that says what it is, and a file over
// maxBytes with one wrapping ErrFileTooLarge, unread. Nothing in it
// blocks on what it opens: the file is opened with O_NONBLOCK (opening a
// FIFO with no writer would otherwise wait forever) and its type is
// checked on the opened descriptor, so a file swapped for a FIFO between
// a look and the open is refused too.
func ReadModuleFile(path string, maxBytes int64) ([]byte, error) {
	// Look before opening, so that no device is opened (opening some has
	// effects); the check that counts is the one on the descriptor.
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := regular(path, st.Mode()); err != nil {
		return nil, err
	}
	f, st, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	base := filepath.Base(path)
	if st.Size() > maxBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes; the limit is %d", ErrFileTooLarge, base, st.Size(), maxBytes)
	}
	b, err := readSized(f, st.Size(), maxBytes)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > maxBytes {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrFileTooLarge, base, maxBytes)
	}
	return b, nil
}

// openRegular opens path for reading without waiting on what it is
// (O_NONBLOCK: opening a FIFO with no writer returns at once) and checks,
// on the opened descriptor, that it is a regular file: whatever the path
// named when it was looked at, what was opened is what counts.
func openRegular(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err == nil {
		err = regular(path, st.Mode())
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// regular returns nil for a regular file's mode (that of path, after its
// symlinks), and an error naming the kind of file otherwise.
func regular(path string, mode fs.FileMode) error {
	if mode.IsRegular() {
		return nil
	}
	kind := "not a regular file"
	switch {
	case mode.IsDir():
		kind = "a directory"
	case mode&fs.ModeNamedPipe != 0:
		kind = "a FIFO (named pipe)"
	case mode&fs.ModeSocket != 0:
		kind = "a socket"
	case mode&fs.ModeCharDevice != 0:
		kind = "a character device"
	case mode&fs.ModeDevice != 0:
		kind = "a block device"
	}
	is := "is"
	if lst, err := os.Lstat(path); err == nil && lst.Mode()&fs.ModeSymlink != 0 {
		is = "is a symlink to"
	}
	return fmt.Errorf("%w: %s %s %s; only regular files (or symlinks to them) are loaded", ErrNotRegularFile, filepath.Base(path), is, kind)
}

// readSized reads f, whose size was size bytes when it was looked at, up
// to maxBytes+1 bytes: the extra byte tells a file over the limit. A
// module is several megabytes; it is read into one buffer of the size
// the file had, with one byte to spare to tell a file that grew since,
// rather than into a buffer that doubles as it goes (each doubling a
// copy, which the race detector makes costly).
func readSized(f io.Reader, size, maxBytes int64) ([]byte, error) {
	b := make([]byte, min(size, maxBytes)+1)
	n, err := io.ReadFull(f, b)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return b[:n], nil // the file's end, where it was or before
	case err != nil:
		return nil, err
	}
	// The file grew since it was looked at: read on, to the limit.
	rest, err := io.ReadAll(io.LimitReader(f, maxBytes+1-int64(n)))
	if err != nil {
		return nil, err
	}
	return append(b, rest...), nil
}
