// Package clientbench compares the two maintained Go Redis clients on the
// shared store's traffic: a pipelined read and write of a conversation's
// keys, and a compare-and-set of its plugin state (WATCH/MULTI and a Lua
// script by EVALSHA), against a real redis-server on a Unix socket. It is
// its own module so the daemon does not depend on the client it did not
// choose; RATIONALE.md records the numbers.
//
//	cd internal/store/redisstore/clientbench && go test -bench . -benchtime 20000x -count 3
package clientbench

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// startRedis starts redis-server on a Unix socket in a temp dir.
func startRedis(b *testing.B) string {
	b.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		b.Skip("redis-server not installed (make deps)")
	}
	dir := b.TempDir()
	sock := filepath.Join(dir, "redis.sock")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for i := 0; i < 500; i++ {
		if _, err := os.Stat(sock); err == nil {
			return sock
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatal("redis-server did not start")
	return ""
}

const casScript = `
local v = redis.call('HGET', KEYS[1], 'v')
if (v or '') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 's', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1`

var state = []byte(fmt.Sprintf("%0512d", 7)) // a typical policy state, 512 bytes

func BenchmarkGoRedis(b *testing.B) {
	sock := startRedis(b)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	defer c.Close()
	b.Run("pipeline-get-set", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			k := "{c" + strconv.Itoa(i%1000) + "}"
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Get(ctx, k+":s")
				p.Set(ctx, k+":s", state, time.Hour)
				p.ZAdd(ctx, "idx", redis.Z{Score: float64(i), Member: k})
				return nil
			})
			if err != nil && err != redis.Nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("watch-multi-cas", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			k := "{w" + strconv.Itoa(i%1000) + "}:st"
			err := c.Watch(ctx, func(tx *redis.Tx) error {
				v, err := tx.HGet(ctx, k, "v").Result()
				if err != nil && err != redis.Nil {
					return err
				}
				n, _ := strconv.Atoi(v)
				_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.HSet(ctx, k, "v", n+1, "s", state)
					p.PExpire(ctx, k, time.Hour)
					return nil
				})
				return err
			}, k)
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	script := redis.NewScript(casScript)
	b.Run("evalsha-cas", func(b *testing.B) {
		vers := map[string]int{}
		run := strconv.FormatInt(time.Now().UnixNano(), 36)
		for i := 0; b.Loop(); i++ {
			k := "{e" + run + strconv.Itoa(i%1000) + "}:st"
			old := ""
			if n, ok := vers[k]; ok {
				old = strconv.Itoa(n)
			}
			ok, err := script.Run(ctx, c, []string{k}, old, vers[k]+1, state, 3600000).Int()
			if err != nil || ok != 1 {
				b.Fatal(ok, err)
			}
			vers[k]++
		}
	})
	b.Run("parallel-get", func(b *testing.B) {
		c.Set(ctx, "hot", state, 0)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := c.Get(ctx, "hot").Err(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func BenchmarkRueidis(b *testing.B) {
	sock := startRedis(b)
	ctx := context.Background()
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{sock},
		DialFn: func(_ string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			return d.Dial("unix", sock)
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.Run("pipeline-get-set", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			k := "{c" + strconv.Itoa(i%1000) + "}"
			for _, r := range c.DoMulti(ctx,
				c.B().Get().Key(k+":s").Build(),
				c.B().Set().Key(k+":s").Value(rueidis.BinaryString(state)).Ex(time.Hour).Build(),
				c.B().Zadd().Key("idx").ScoreMember().ScoreMember(float64(i), k).Build(),
			) {
				if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("watch-multi-cas", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			k := "{w" + strconv.Itoa(i%1000) + "}:st"
			err := c.Dedicated(func(dc rueidis.DedicatedClient) error {
				dc.Do(ctx, dc.B().Watch().Key(k).Build())
				v, err := dc.Do(ctx, dc.B().Hget().Key(k).Field("v").Build()).ToString()
				if err != nil && !rueidis.IsRedisNil(err) {
					return err
				}
				n, _ := strconv.Atoi(v)
				for _, r := range dc.DoMulti(ctx,
					dc.B().Multi().Build(),
					dc.B().Hset().Key(k).FieldValue().FieldValue("v", strconv.Itoa(n+1)).FieldValue("s", rueidis.BinaryString(state)).Build(),
					dc.B().Pexpire().Key(k).Milliseconds(3600000).Build(),
					dc.B().Exec().Build(),
				) {
					if err := r.Error(); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	script := rueidis.NewLuaScript(casScript)
	b.Run("evalsha-cas", func(b *testing.B) {
		vers := map[string]int{}
		run := strconv.FormatInt(time.Now().UnixNano(), 36)
		for i := 0; b.Loop(); i++ {
			k := "{e" + run + strconv.Itoa(i%1000) + "}:st"
			old := ""
			if n, ok := vers[k]; ok {
				old = strconv.Itoa(n)
			}
			ok, err := script.Exec(ctx, c, []string{k}, []string{old, strconv.Itoa(vers[k] + 1), string(state), "3600000"}).AsInt64()
			if err != nil || ok != 1 {
				b.Fatal(ok, err)
			}
			vers[k]++
		}
	})
	b.Run("parallel-get", func(b *testing.B) {
		c.Do(ctx, c.B().Set().Key("hot").Value(string(state)).Build())
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := c.Do(ctx, c.B().Get().Key("hot").Build()).Error(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
