package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/compactd/compactd/internal/config"
)

// ErrRunning is returned when another daemon serves the socket path.
var ErrRunning = errors.New("another compactd is running")

// unixSocket is a listening Unix socket and the lock that proves this
// process owns its path.
type unixSocket struct {
	net.Listener
	path string
	lock *os.File
}

// listenUnix listens on path, owner-only (0600).
//
// A lock file beside the socket (path + ".lock", flock) proves ownership:
// if another compactd holds it, listenUnix fails with ErrRunning naming
// its pid. A socket file left by a crashed daemon is replaced; any other
// process answering on the path is reported, not clobbered; a path that
// exists and is not a socket is left alone. The socket is bound under a
// temporary name, restricted to 0600 and renamed into place, so it is
// never reachable with wider permissions. The directory is created 0700
// when missing.
func listenUnix(path string) (*unixSocket, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("socket lock: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(path + ".lock")
		lock.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w on %s (pid %s); stop it first, or pass another --socket", ErrRunning, path, strings.TrimSpace(string(pid)))
		}
		return nil, fmt.Errorf("socket lock: %w", err)
	}
	fail := func(err error) (*unixSocket, error) {
		lock.Close()
		return nil, err
	}
	lock.Truncate(0)
	lock.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)

	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&fs.ModeSocket == 0 {
			return fail(fmt.Errorf("%s exists and is not a socket; not touching it", path))
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return fail(fmt.Errorf("%w: a process is listening on %s", ErrRunning, path))
		}
		if err := os.Remove(path); err != nil {
			return fail(fmt.Errorf("removing the stale socket %s: %w", path, err))
		}
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".compactd-%d.sock", os.Getpid()))
	os.Remove(tmp)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return fail(fmt.Errorf("listening on %s: %w", path, err))
	}
	ln.SetUnlinkOnClose(false) // it is renamed; Close removes path itself
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		os.Remove(tmp)
		return fail(fmt.Errorf("socket permissions: %w", err))
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		os.Remove(tmp)
		return fail(fmt.Errorf("listening on %s: %w", path, err))
	}
	return &unixSocket{Listener: ln, path: path, lock: lock}, nil
}

// Close stops listening, removes the socket and releases the lock. The
// lock file stays (removing it would let two daemons race for it).
func (s *unixSocket) Close() error {
	err := s.Listener.Close()
	if errors.Is(err, net.ErrClosed) { // http.Server.Shutdown closed it
		err = nil
	}
	if rerr := os.Remove(s.path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && err == nil {
		err = rerr
	}
	s.lock.Close()
	return err
}

// listenTCP listens on a loopback address only.
func listenTCP(addr string) (net.Listener, error) {
	if err := config.CheckLoopback(addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	if ta, ok := ln.Addr().(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
		ln.Close()
		return nil, fmt.Errorf("%s resolved to %s, which is not a loopback address", addr, ln.Addr())
	}
	return ln, nil
}
