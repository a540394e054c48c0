package paths

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDefaults(t *testing.T) {
	tests := []struct {
		name                                  string
		env                                   map[string]string
		socket, state, config, plugins, cache string
	}{
		{
			name:   "home only",
			env:    map[string]string{"HOME": "/h"},
			socket: "/h/.local/state/compactd/compactd.sock", state: "/h/.local/state/compactd",
			config: "/h/.config/compactd/config.yaml", plugins: "/h/.local/share/compactd/plugins", cache: "/h/.cache/compactd/wazero",
		},
		{
			name: "xdg",
			env: map[string]string{"HOME": "/h", "XDG_RUNTIME_DIR": "/run/user/1", "XDG_STATE_HOME": "/st",
				"XDG_CONFIG_HOME": "/cf", "XDG_DATA_HOME": "/da", "XDG_CACHE_HOME": "/ca"},
			socket: "/run/user/1/compactd.sock", state: "/st/compactd",
			config: "/cf/compactd/config.yaml", plugins: "/da/compactd/plugins", cache: "/ca/compactd/wazero",
		},
		{
			name:   "state home without a runtime dir",
			env:    map[string]string{"HOME": "/h", "XDG_STATE_HOME": "/st"},
			socket: "/st/compactd/compactd.sock", state: "/st/compactd",
			config: "/h/.config/compactd/config.yaml", plugins: "/h/.local/share/compactd/plugins", cache: "/h/.cache/compactd/wazero",
		},
		{
			name:   "no home",
			env:    map[string]string{},
			socket: filepath.Join(os.TempDir(), ".local/state/compactd/compactd.sock"), state: filepath.Join(os.TempDir(), ".local/state/compactd"),
			config: filepath.Join(os.TempDir(), ".config/compactd/config.yaml"), plugins: filepath.Join(os.TempDir(), ".local/share/compactd/plugins"),
			cache: filepath.Join(os.TempDir(), ".cache/compactd/wazero"),
		},
		{
			name: "compactd variables win",
			env: map[string]string{"HOME": "/h", "XDG_RUNTIME_DIR": "/run/user/1", "COMPACTD_SOCKET": "/x.sock",
				"COMPACTD_CONFIG": "/c.yaml", "COMPACTD_PLUGINS": "/p"},
			socket: "/x.sock", state: "/h/.local/state/compactd",
			config: "/c.yaml", plugins: "/p", cache: "/h/.cache/compactd/wazero",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string { return tt.env[k] }
			for _, c := range []struct{ what, got, want string }{
				{"Socket", Socket(getenv), tt.socket},
				{"StateDir", StateDir(getenv), tt.state},
				{"ConfigFile", ConfigFile(getenv), tt.config},
				{"PluginsDir", PluginsDir(getenv), tt.plugins},
				{"CacheDir", CacheDir(getenv), tt.cache},
			} {
				if c.got != c.want {
					t.Errorf("%s = %s, want %s", c.what, c.got, c.want)
				}
			}
			// Without a runtime dir the socket is in the state directory:
			// the client's rule and StateDir's must agree.
			if tt.env["COMPACTD_SOCKET"] == "" && tt.env["XDG_RUNTIME_DIR"] == "" {
				if dir := filepath.Dir(Socket(getenv)); dir != StateDir(getenv) {
					t.Errorf("the socket's directory %s is not StateDir %s", dir, StateDir(getenv))
				}
			}
		})
	}
}
