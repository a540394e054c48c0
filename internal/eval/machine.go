package eval

import (
	"bufio"
	"os"
	"runtime"
	"strings"
)

// ThisMachine describes the machine the process runs on.
func ThisMachine() *Machine {
	return &Machine{
		OS: runtime.GOOS, Arch: runtime.GOARCH, CPU: cpuModel(),
		CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Go: runtime.Version(),
	}
}

// cpuModel reads the CPU's name from /proc/cpuinfo (Linux); "" elsewhere.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
