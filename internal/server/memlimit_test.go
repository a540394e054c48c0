package server

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// memoryLimit is a memory bound put on a child process, so that a test
// whose daemon would grow without bound fails (the kernel kills the
// child at the bound) instead of taking the machine down.
type memoryLimit struct {
	how   string // "cgroup v1", "cgroup v2" or "prlimit --as"
	dir   string // the cgroup's directory ("" for prlimit)
	bytes int64
}

// limitMemory bounds the memory of the process pid: in a memory cgroup
// of its own (v1, then v2) beneath the test's, else with an address-space
// limit (prlimit --as; coarse for Go, which reserves address space, so
// the limit is set that much above the process's present size). The
// cgroup is removed when the test ends (after the test's cleanups stop
// the process). A machine with none of these skips the test.
func limitMemory(t testing.TB, pid int, bytes int64) *memoryLimit {
	t.Helper()
	name := fmt.Sprintf("compactd-test-%d-%d", os.Getpid(), pid)
	for _, try := range []struct {
		how, root, self, limitFile string
	}{
		{"cgroup v1", "/sys/fs/cgroup/memory", cgroupOf("memory"), "memory.limit_in_bytes"},
		{"cgroup v2", "/sys/fs/cgroup", cgroupOf(""), "memory.max"},
	} {
		if try.self == "" {
			continue
		}
		dir := filepath.Join(try.root, try.self, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			continue
		}
		err := os.WriteFile(filepath.Join(dir, try.limitFile), []byte(strconv.FormatInt(bytes, 10)), 0)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
		}
		if err != nil {
			os.Remove(dir)
			continue
		}
		// Registered now, run after the cleanups registered before it
		// (the child's): the group is empty by then.
		t.Cleanup(func() {
			for i := 0; i < 100 && os.Remove(dir) != nil; i++ {
				time.Sleep(20 * time.Millisecond)
			}
		})
		return &memoryLimit{how: try.how, dir: dir, bytes: bytes}
	}
	if path, err := exec.LookPath("prlimit"); err == nil {
		limit := bytes + procStatusKB(pid, "VmSize:")<<10
		if out, err := exec.Command(path, "--pid", strconv.Itoa(pid), fmt.Sprintf("--as=%d", limit)).CombinedOutput(); err == nil {
			return &memoryLimit{how: "prlimit --as", bytes: limit}
		} else {
			t.Logf("prlimit: %v: %s", err, out)
		}
	}
	t.Skip("no way to bound a child's memory here (no writable memory cgroup, no prlimit): not running a test whose failure could exhaust the machine")
	return nil
}

// cgroupOf returns this process's cgroup path in the v1 hierarchy of the
// controller, or with controller "" in the v2 hierarchy ("" when absent).
func cgroupOf(controller string) string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if controller == "" && parts[0] == "0" && parts[1] == "" {
			return parts[2]
		}
		for _, c := range strings.Split(parts[1], ",") {
			if controller != "" && c == controller {
				return parts[2]
			}
		}
	}
	return ""
}

// oomKills returns how often the kernel killed a process of the cgroup
// for want of memory (0 when the limit is not a cgroup).
func (m *memoryLimit) oomKills() int {
	if m.dir == "" {
		return 0
	}
	for _, f := range []string{"memory.oom_control", "memory.events"} {
		b, err := os.ReadFile(filepath.Join(m.dir, f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if n, ok := strings.CutPrefix(line, "oom_kill "); ok {
				k, _ := strconv.Atoi(strings.TrimSpace(n))
				return k
			}
		}
	}
	return 0
}

// String describes the limit for a test's log.
func (m *memoryLimit) String() string {
	return fmt.Sprintf("%s, %d MiB", m.how, m.bytes>>20)
}

// procStatusKB reads a "kB" field of /proc/PID/status (0 if absent).
func procStatusKB(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}
