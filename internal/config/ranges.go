package config

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/host"
	"gopkg.in/yaml.v3"
)

// Ranges of the plugins' memory budget and compile budget, in MiB.
const (
	MinTotalMemoryMB   = 128
	MaxTotalMemoryMB   = 1 << 22 // 4 TiB
	MinCompileMemoryMB = 64
)

// RangeError is a setting outside its documented range
// (docs/configuration.md, "The config file"). Its message names the key, the value and the range.
type RangeError struct {
	// Key is the setting's dotted path, e.g. "limits.plugin.max_instances".
	Key string
	// Value is the value as written.
	Value string
	// Allowed is the range, e.g. "1 to 256".
	Allowed string
	// Line is the setting's line in the file (0 when not known).
	Line int
}

func (e *RangeError) Error() string {
	where := ""
	if e.Line > 0 {
		where = fmt.Sprintf("line %d: ", e.Line)
	}
	return fmt.Sprintf("%s%s: %s is out of range (allowed: %s; 0 or absent: the default)", where, e.Key, e.Value, e.Allowed)
}

// Ranges of the settings, for values other than 0 (which means "the
// default"). docs/configuration.md documents each.
const (
	MinBodyBytes       = 1 << 10
	MaxBodyBytes       = 1 << 30
	MaxMaxMessages     = 1_000_000
	MinRequestTimeout  = 100 * time.Millisecond
	MaxServerTimeout   = time.Hour
	MinServerTimeout   = 100 * time.Millisecond
	MaxIdleTimeout     = 24 * time.Hour
	MinStateTTL        = time.Minute
	MaxStateTTL        = 10 * 365 * 24 * time.Hour
	MaxConversations   = 10_000_000
	MinStateBytes      = 64 << 10
	MaxStateBytes      = 64 << 30
	MinStateTimeout    = 10 * time.Millisecond
	MaxStateTimeout    = time.Minute
	MinStateFlush      = 10 * time.Millisecond
	MaxStateFlush      = time.Minute
	MinPluginMemoryMB  = host.MinMemoryPages >> 4
	MaxPluginMemoryMB  = host.MaxMemoryPages >> 4
	MaxCompactSetting  = math.MaxInt32
	MaxPipeline        = 16
	MaxSocketPathBytes = 107 // a Unix socket path, without its terminating NUL
	MinProxyTimeout    = time.Second
	MaxProxyTimeout    = 24 * time.Hour
	MaxProxyStored     = 16 << 30
	MinProxyEventBytes = 64 << 10
	MaxProxyEventBytes = 1 << 30
	MinConvCacheBytes  = 1 << 20
	MaxConvCacheBytes  = 64 << 30
	MinIdleUnload      = time.Second
	MaxIdleUnload      = 365 * 24 * time.Hour
	// MaxFileBytes bounds the config file: a larger file is refused at
	// start and on SIGHUP, and an update that would make it larger is
	// refused.
	MaxFileBytes = 1 << 20
)

// intRange checks an integer setting.
func intRange[T int | int64](key string, v, lo, hi T) error {
	if v != 0 && (v < lo || v > hi) {
		return &RangeError{Key: key, Value: strconv.FormatInt(int64(v), 10), Allowed: fmt.Sprintf("%d to %d", lo, hi)}
	}
	return nil
}

// compileRange is max_compile_memory_mb's upper bound: the memory budget
// when it is set (the host refuses a larger compile budget), else the
// setting's own.
func compileRange(l *Limits) int {
	if l.MaxTotalMemoryMB > 0 {
		return max(l.MaxTotalMemoryMB, MinCompileMemoryMB)
	}
	return MaxTotalMemoryMB
}

// durationRange checks a duration setting.
func durationRange(key string, v Duration, lo, hi time.Duration) error {
	if v != 0 && (v.D() < lo || v.D() > hi) {
		return &RangeError{Key: key, Value: v.String(), Allowed: fmt.Sprintf("%v to %v", lo, hi)}
	}
	return nil
}

// checkRanges reports the first setting outside its range.
func (c *Config) checkRanges() error {
	l := &c.Limits
	checks := []error{
		intRange("limits.max_body_bytes", l.MaxBodyBytes, MinBodyBytes, MaxBodyBytes),
		intRange("limits.max_messages", l.MaxMessages, 1, MaxMaxMessages),
		durationRange("limits.request_timeout", l.RequestTimeout, MinRequestTimeout, MaxServerTimeout),
		durationRange("limits.read_timeout", l.ReadTimeout, MinServerTimeout, MaxServerTimeout),
		durationRange("limits.write_timeout", l.WriteTimeout, MinServerTimeout, MaxServerTimeout+30*time.Second),
		durationRange("limits.idle_timeout", l.IdleTimeout, MinServerTimeout, MaxIdleTimeout),
		durationRange("limits.shutdown_timeout", l.ShutdownTimeout, MinServerTimeout, MaxServerTimeout),
		intRange("limits.conversation_cache_bytes", l.ConversationCacheBytes, MinConvCacheBytes, MaxConvCacheBytes),
		durationRange("limits.plugin_idle_unload", l.PluginIdleUnload, MinIdleUnload, MaxIdleUnload),
		intRange("limits.max_total_memory_mb", l.MaxTotalMemoryMB, MinTotalMemoryMB, MaxTotalMemoryMB),
		intRange("limits.max_compile_memory_mb", l.MaxCompileMemoryMB, MinCompileMemoryMB, compileRange(l)),
		l.Plugin.checkRanges("limits.plugin"),
		durationRange("state.ttl", c.State.TTL, MinStateTTL, MaxStateTTL),
		intRange("state.max_conversations", c.State.MaxConversations, 1, MaxConversations),
		intRange("state.max_state_bytes", c.State.MaxStateBytes, MinStateBytes, MaxStateBytes),
		durationRange("state.timeout", c.State.Timeout, MinStateTimeout, MaxStateTimeout),
		durationRange("state.flush_interval", c.State.FlushInterval, MinStateFlush, MaxStateFlush),
		c.Proxy.checkRanges(),
		intRange("log.requests", c.Log.Requests, 1, 1_000_000),
		intRange("log.requests_per_conversation", c.Log.RequestsPerConversation, 1, 100_000),
		intRange("log.access_max_bytes", c.Log.AccessMaxBytes, 4096, 1<<40),
		intRange("log.access_keep", c.Log.AccessKeep, 1, 100),
	}
	names := make([]string, 0, len(l.Plugins))
	for name := range l.Plugins {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		checks = append(checks, l.Plugins[name].checkRanges("limits.plugins."+name))
	}
	if c.Compact != nil {
		for _, k := range []struct {
			key string
			v   *int
		}{{"max_tokens", c.Compact.MaxTokens}, {"token_threshold", c.Compact.TokenThreshold},
			{"message_threshold", c.Compact.MessageThreshold}, {"turn_threshold", c.Compact.TurnThreshold},
			{"retention_window", c.Compact.RetentionWindow}} {
			if k.v != nil && (*k.v < 0 || *k.v > MaxCompactSetting) {
				checks = append(checks, &RangeError{Key: "compact." + k.key, Value: strconv.Itoa(*k.v), Allowed: fmt.Sprintf("0 to %d", MaxCompactSetting)})
			}
		}
	}
	if n := len(c.Pipeline); n > MaxPipeline {
		checks = append(checks, &RangeError{Key: "pipeline", Value: fmt.Sprintf("a list of %d policies", n), Allowed: fmt.Sprintf("1 to %d policies", MaxPipeline)})
	}
	if n := len(c.Socket); n > MaxSocketPathBytes {
		checks = append(checks, &RangeError{Key: "socket", Value: fmt.Sprintf("a path of %d bytes", n), Allowed: fmt.Sprintf("at most %d bytes (a Unix socket path)", MaxSocketPathBytes)})
	}
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkRanges checks the proxy block's numbers (docs/configuration.md,
// "The config file"; docs/proxy.md).
func (p *Proxy) checkRanges() error {
	if t := p.Threshold; t != 0 && !(t > 0 && t <= 1) {
		return &RangeError{Key: "proxy.threshold", Value: strconv.FormatFloat(t, 'g', -1, 64), Allowed: "a ratio above 0 and at most 1"}
	}
	if t := p.Target; t != 0 && !(t > 0 && t <= 1) {
		return &RangeError{Key: "proxy.target", Value: strconv.FormatFloat(t, 'g', -1, 64), Allowed: "a ratio above 0 and at most 1 (lowered to proxy.threshold when above it)"}
	}
	if t := p.PrepareThreshold; t != 0 && !(t > 0 && t < 1) {
		return &RangeError{Key: "proxy.prepare_threshold", Value: strconv.FormatFloat(t, 'g', -1, 64), Allowed: "a ratio above 0 and below proxy.threshold (0: off)"}
	}
	for _, err := range []error{
		durationRange("proxy.prepare_wait", p.PrepareWait, 0, MaxPrepareWait),
		intRange("proxy.prepare_workers", p.PrepareWorkers, 1, MaxPrepareWorkers),
		intRange("proxy.prepare_queue", p.PrepareQueue, 1, MaxPrepareQueue),
		intRange("proxy.trigger_tokens", p.TriggerTokens, 1, abi.MaxTokenCount),
		intRange("proxy.context_window", p.ContextWindow, 1, MaxProxyContextWindow),
		durationRange("proxy.timeout", p.Timeout, MinProxyTimeout, MaxProxyTimeout),
		durationRange("proxy.read_timeout", p.ReadTimeout, MinProxyTimeout, MaxProxyTimeout),
		intRange("proxy.max_event_bytes", p.MaxEventBytes, MinProxyEventBytes, MaxProxyEventBytes),
		intRange("proxy.max_stored_bytes", p.MaxStoredBytes, 1, MaxProxyStored),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkRanges checks one plugin's limits; prefix is their key.
func (l PluginLimits) checkRanges(prefix string) error {
	for _, err := range []error{
		intRange(prefix+".max_memory_mb", l.MaxMemoryMB, MinPluginMemoryMB, MaxPluginMemoryMB),
		durationRange(prefix+".call_timeout", l.CallTimeout, host.MinCallTimeout, host.MaxCallTimeout),
		intRange(prefix+".max_output_bytes", l.MaxOutputBytes, host.MinOutputBytes, host.MaxOutputBytes),
		intRange(prefix+".max_instances", l.MaxInstances, 1, host.MaxInstances),
		intRange(prefix+".work_budget", l.WorkBudget, host.MinWorkBudget, host.MaxWorkBudget),
		intRange(prefix+".start_work_budget", l.StartWorkBudget, host.MinWorkBudget, host.MaxWorkBudget),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// lineOf returns the line of the setting at the dotted path key in the
// document whose top-level mapping is root (0 if it is not there).
func lineOf(root *yaml.Node, key string) int {
	n := root
	line := 0
	for _, part := range strings.Split(key, ".") {
		for n != nil && n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		if n == nil || n.Kind != yaml.MappingNode {
			return line
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == part {
				line, next = n.Content[i].Line, n.Content[i+1]
			}
		}
		if next == nil {
			return line
		}
		n = next
	}
	return line
}
