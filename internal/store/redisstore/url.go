package redisstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Target is where state.url points: a standalone server or a cluster.
type Target struct {
	// Standalone is set for one URL (redis://, rediss://, unix://).
	Standalone *redis.Options
	// Cluster is set for several comma-separated addresses.
	Cluster *redis.ClusterOptions
}

// ParseURL reads state.url: one URL (redis://host:port/db, rediss://…,
// unix:///path?db=N) is a standalone server; several, comma-separated, are
// the seed addresses of a Redis Cluster (all redis:// or all rediss://,
// credentials from the first). passwordFile, when set, holds the password
// (its first line); it wins over a password in the URL.
func ParseURL(raw, passwordFile string) (Target, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return Target{}, errors.New("redis: empty state.url")
	}
	var password string
	if passwordFile != "" {
		b, err := os.ReadFile(passwordFile)
		if err != nil {
			return Target{}, fmt.Errorf("redis: password file: %w", err)
		}
		password, _, _ = strings.Cut(string(b), "\n")
		password = strings.TrimRight(password, "\r")
		if password == "" {
			return Target{}, fmt.Errorf("redis: password file %s is empty", passwordFile)
		}
	}
	parts := strings.Split(raw, ",")
	if len(parts) == 1 {
		o, err := redis.ParseURL(parts[0])
		if err != nil {
			return Target{}, fmt.Errorf("redis: state.url %s: %w", Redact(parts[0]), err)
		}
		if password != "" {
			o.Password = password
		}
		return Target{Standalone: o}, nil
	}
	c := &redis.ClusterOptions{}
	var scheme string
	for i, p := range parts {
		p = strings.TrimSpace(p)
		pu, err := url.Parse(p)
		if err != nil || pu.Host == "" || (pu.Scheme != "redis" && pu.Scheme != "rediss") {
			return Target{}, fmt.Errorf("redis: cluster address %q: want redis://host:port or rediss://host:port", Redact(p))
		}
		if i == 0 {
			scheme = pu.Scheme
			c.Username = pu.User.Username()
			c.Password, _ = pu.User.Password()
		} else if pu.Scheme != scheme {
			return Target{}, errors.New("redis: cluster addresses mix redis:// and rediss://")
		}
		if pu.Path != "" && pu.Path != "/" && pu.Path != "/0" {
			return Target{}, fmt.Errorf("redis: cluster address %s: a cluster has only database 0", Redact(p))
		}
		c.Addrs = append(c.Addrs, pu.Host)
	}
	if scheme == "rediss" {
		c.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if password != "" {
		c.Password = password
	}
	return Target{Cluster: c}, nil
}

// Redact returns raw with any password replaced by "xxxxx", so a URL can
// be logged and shown.
func Redact(raw string) string {
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
