package host

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultMaxTotalMemory is the default memory budget of every plugin
// together (Config.MaxTotalMemory): half of the memory this process may
// have, the machine's physical memory or its cgroup's limit, whichever
// is smaller; 2 GiB where neither can be read.
func DefaultMaxTotalMemory() uint64 {
	avail := physicalMemory()
	if c := cgroupMemoryLimit(); c > 0 && (avail == 0 || c < avail) {
		avail = c
	}
	if avail == 0 {
		return 2 << 30
	}
	return avail / 2
}

// physicalMemory reads MemTotal from /proc/meminfo (0 if it cannot).
func physicalMemory() uint64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// cgroupMemoryLimit returns the memory limit of this process's cgroup
// (v2 memory.max, else v1 memory.limit_in_bytes), 0 if there is none.
func cgroupMemoryLimit() uint64 {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	var limit uint64
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			file = filepath.Join("/sys/fs/cgroup", parts[2], "memory.max")
		case strings.Contains(","+parts[1]+",", ",memory,"):
			file = filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes")
		default:
			continue
		}
		v, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(v)), 10, 64)
		if err != nil || n == 0 || n >= 1<<60 { // "max", or v1's "no limit"
			continue
		}
		if limit == 0 || n < limit {
			limit = n
		}
	}
	return limit
}
