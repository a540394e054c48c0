package registry

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/compactd/compactd/abi"
)

// The description cache: what describe answered for bytes that loaded and
// passed the smoke test, kept by their SHA-256 in Options.DescribedDir.
// When the same bytes come back (a restart, a file put back), the
// registry serves them from their description at once and compiles them
// on first use (from the compilation cache): no instantiation, no smoke
// test, no compile on the start's path.

// described is one cache entry.
type described struct {
	// ABI is the host's ABI version when the entry was written: a host
	// of another version checks the bytes again.
	ABI         string          `json:"abi"`
	SHA256      string          `json:"sha256"`
	Description abi.Description `json:"description"`
}

func (r *Registry) describedPath(hash string) string {
	return filepath.Join(r.opts.DescribedDir, hash+".json")
}

// lookupDescribed returns the cached description of the bytes with hash,
// if there is one.
func (r *Registry) lookupDescribed(hash string) *abi.Description {
	if r.opts.DescribedDir == "" {
		return nil
	}
	b, err := os.ReadFile(r.describedPath(hash))
	if err != nil {
		return nil
	}
	var d described
	if err := json.Unmarshal(b, &d); err != nil || d.ABI != abi.Version.String() || d.SHA256 != hash {
		return nil
	}
	return &d.Description
}

// storeDescribed records the description of bytes that passed.
func (r *Registry) storeDescribed(hash string, desc abi.Description) {
	if r.opts.DescribedDir == "" {
		return
	}
	if err := r.writeDescribed(hash, desc); err != nil {
		r.logger.Warn("caching a plugin's description", "error", err)
	}
}

func (r *Registry) writeDescribed(hash string, desc abi.Description) error {
	if err := os.MkdirAll(r.opts.DescribedDir, 0o755); err != nil {
		return err
	}
	b, err := json.Marshal(described{ABI: abi.Version.String(), SHA256: hash, Description: desc})
	if err != nil {
		return err
	}
	// Write and rename: a reader never sees half an entry.
	tmp, err := os.CreateTemp(r.opts.DescribedDir, ".described-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), r.describedPath(hash)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("caching a description: %w", err)
	}
	return nil
}
