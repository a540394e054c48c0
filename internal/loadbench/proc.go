package loadbench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ProcCPU returns the CPU time a process has run so far: the sum of its
// threads' run time from /proc/PID/task/*/schedstat (nanosecond
// resolution, unlike the clock ticks of /proc/PID/stat). Threads that
// exited are not counted; Go runtimes rarely end threads.
func ProcCPU(pid int) (time.Duration, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil {
		return 0, err
	}
	if len(tasks) == 0 {
		return 0, fmt.Errorf("loadbench: no threads for process %d", pid)
	}
	var total int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended meanwhile
		}
		f := bytes.Fields(b)
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("loadbench: %s: %w", t, err)
		}
		total += ns
	}
	return time.Duration(total), nil
}

// Memory is a process's resident memory.
type Memory struct {
	RSS, Peak int64 // bytes: VmRSS and VmHWM
}

// ProcMemory reads a process's resident memory from /proc/PID/status.
func ProcMemory(pid int) (Memory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, err
	}
	defer f.Close()
	var m Memory
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var dst *int64
		switch {
		case strings.HasPrefix(line, "VmRSS:"):
			dst = &m.RSS
		case strings.HasPrefix(line, "VmHWM:"):
			dst = &m.Peak
		default:
			continue
		}
		fields := strings.Fields(line)
		if len(fields) >= 2 {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			*dst = kb << 10
		}
	}
	return m, sc.Err()
}

// LoadAverage returns the first three fields of /proc/loadavg.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
