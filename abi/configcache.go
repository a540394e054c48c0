package abi

import (
	"reflect"
)

// ConfigCache remembers decoded configs. A plugin instance sees the same
// config on almost every call, and decoding JSON is slow in a Wasm guest
// (see pdk), so the PDK gives every request a cache: DecodeConfig then
// decodes a given (type, config, starting value) once. Only configs whose
// type holds no pointers, slices, maps, channels, functions or interfaces
// are cached, so a cached value can be copied safely. A ConfigCache is not
// safe for concurrent use (a Wasm instance runs one call at a time).
type ConfigCache struct {
	max     int
	entries []configEntry
}

type configEntry struct {
	typ     reflect.Type
	config  string
	initial reflect.Value
	decoded reflect.Value
}

// NewConfigCache returns a cache holding up to max decoded configs.
func NewConfigCache(max int) *ConfigCache { return &ConfigCache{max: max} }

// UseConfigCache makes DecodeConfig consult c.
func (r *CompactRequest) UseConfigCache(c *ConfigCache) { r.configCache = c }

func (c *ConfigCache) lookup(config []byte, v reflect.Value) bool {
	for i := range c.entries {
		e := &c.entries[i]
		if e.typ == v.Type() && e.config == string(config) && e.initial.Equal(v) {
			v.Set(e.decoded)
			return true
		}
	}
	return false
}

func (c *ConfigCache) store(config []byte, initial, decoded reflect.Value) {
	if len(c.entries) >= c.max {
		c.entries = c.entries[1:]
	}
	ini := reflect.New(initial.Type()).Elem()
	ini.Set(initial)
	dec := reflect.New(decoded.Type()).Elem()
	dec.Set(decoded)
	c.entries = append(c.entries, configEntry{typ: initial.Type(), config: string(config), initial: ini, decoded: dec})
}

// cacheable reports whether values of t can be copied by assignment
// without sharing memory, and compared with Value.Equal.
func cacheable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64, reflect.String:
		return true
	case reflect.Array:
		return cacheable(t.Elem())
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if !cacheable(t.Field(i).Type) {
				return false
			}
		}
		return true
	}
	return false
}
