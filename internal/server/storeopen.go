package server

import (
	"context"
	"strings"
	"time"

	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/internal/store"
	"github.com/compactd/compactd/internal/store/redisstore"
	"github.com/hashicorp/go-hclog"
)

// openStore opens the daemon's store: the shared Redis or Valkey server
// that state.url (or COMPACTD_STATE_URL) names, else the embedded bbolt
// file in the state directory. An unreachable server is no error: the
// store starts degraded and the daemon serves from requests alone.
func openStore(_ context.Context, cfg *config.Config, opts DaemonOptions, logger hclog.Logger) (store.Backend, error) {
	flush := storeFlush(cfg, opts)
	url := strings.TrimSpace(opts.Getenv(config.EnvStateURL))
	if url == "" {
		url = cfg.State.URL
	}
	if url != "" {
		replica := opts.Replica
		if replica == "" {
			replica = strings.TrimSpace(opts.Getenv("COMPACTD_REPLICA"))
		}
		timeout := cfg.State.Timeout.D()
		if opts.StoreTimeout > 0 {
			timeout = opts.StoreTimeout
		}
		r, err := redisstore.Open(redisstore.Options{
			URL: url, PasswordFile: cfg.State.PasswordFile, Replica: replica,
			TTL: cfg.State.TTL.D(), MaxConversations: cfg.State.MaxConversations, MaxStateBytes: cfg.State.MaxStateBytes,
			FlushInterval: flush, OpTimeout: timeout, Logger: logger,
		})
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	st, err := store.Open(store.Options{
		Dir: cfg.StateDir, TTL: cfg.State.TTL.D(), MaxConversations: cfg.State.MaxConversations,
		MaxStateBytes: cfg.State.MaxStateBytes, FlushInterval: flush, Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// storeFlush is the write-behind interval of the store and the request
// log: state.flush_interval, unless DaemonOptions.StoreFlush overrides it.
func storeFlush(cfg *config.Config, opts DaemonOptions) time.Duration {
	if opts.StoreFlush > 0 {
		return opts.StoreFlush
	}
	return cfg.State.FlushInterval.D()
}
