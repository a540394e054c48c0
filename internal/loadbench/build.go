package loadbench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/compactd/compactd/internal/wasmbuild"
)

// Build builds compactd and the built-in plugins from the module at root
// into dir, and returns the binary and the plugins directory.
func Build(ctx context.Context, root, dir string) (bin, plugins string, err error) {
	bin = filepath.Join(dir, "compactd")
	plugins = filepath.Join(dir, "plugins")
	if err := goCmd(ctx, root, "build", "-o", bin, "./cmd/compactd"); err != nil {
		return "", "", err
	}
	if err := goCmd(ctx, root, "run", "./internal/wasmbuild/buildplugins", "-out", plugins); err != nil {
		return "", "", err
	}
	return bin, plugins, nil
}

func goCmd(ctx context.Context, root string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	if out, err := cmd.Output(); err != nil {
		return fmt.Errorf("go %v: %w\n%s", args, err, out)
	}
	return nil
}

// ModuleRoot returns compactd's module root above the working directory.
func ModuleRoot() (string, error) { return wasmbuild.ModuleRoot(".") }
