package wasminstr

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compactd/compactd/internal/wasmbuild"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// wat compiles WebAssembly text with wabt's wat2wasm (installed by `make
// deps`).
func wat(t testing.TB, src string, flags ...string) []byte {
	t.Helper()
	dir := t.TempDir()
	in, out := filepath.Join(dir, "m.wat"), filepath.Join(dir, "m.wasm")
	if err := os.WriteFile(in, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("wat2wasm", append(flags, "-o", out, in)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("wat2wasm (run `make deps` to install wabt): %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// run instantiates an instrumented module without wazero's checks and
// returns it.
func run(t *testing.T, module []byte) (api.Module, *Result) {
	t.Helper()
	res, err := Instrument(module, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCloseOnContextDone(false))
	t.Cleanup(func() { rt.Close(ctx) })
	mod, err := rt.InstantiateWithConfig(ctx, res.Module, wazero.NewModuleConfig().WithStartFunctions())
	if err != nil {
		t.Fatalf("instantiating the instrumented module: %v", err)
	}
	return mod, res
}

const loops = `(module
  (memory 1)
  (global $g (mut i32) (i32.const 7))
  (func (export "sum") (param $n i32) (result i32)
    (local $i i32) (local $s i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $s (i32.add (local.get $s) (local.get $i)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.add (local.get $s) (global.get $g)))
  (func (export "spin")
    (loop $forever (br $forever)))
  (func (export "nested") (result i32)
    (local $i i32) (local $j i32) (local $s i32)
    (loop $outer
      (local.set $j (i32.const 0))
      (loop $inner
        (local.set $s (i32.add (local.get $s) (i32.const 1)))
        (local.set $j (i32.add (local.get $j) (i32.const 1)))
        (br_if $inner (i32.lt_u (local.get $j) (i32.const 3000))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $outer (i32.lt_u (local.get $i) (i32.const 3000))))
    (local.get $s)))`

// TestSemantics: the instrumented module computes what the original does.
func TestSemantics(t *testing.T) {
	mod, res := run(t, wat(t, loops))
	if res.Loops != 4 || res.HasStart {
		t.Errorf("%d loops, start %v", res.Loops, res.HasStart)
	}
	ctx := context.Background()
	for _, n := range []uint64{0, 1, 10, Fuel - 1, Fuel, Fuel + 1, 100000} {
		out, err := mod.ExportedFunction("sum").Call(ctx, n)
		if want := n*(n-1)/2 + 7; err != nil || uint32(out[0]) != uint32(want) {
			t.Errorf("sum(%d) = %v, %v; want %d", n, out, err, uint32(want))
		}
	}
	out, err := mod.ExportedFunction("nested").Call(ctx)
	if err != nil || out[0] != 9_000_000 {
		t.Errorf("nested = %v, %v", out, err)
	}
}

// TestStop: setting the stop global from another goroutine ends a guest
// that loops forever, with a trap; clearing it makes the module usable.
func TestStop(t *testing.T) {
	mod, _ := run(t, wat(t, loops))
	stop := mod.ExportedGlobal(StopGlobal).(api.MutableGlobal)
	set := make(chan struct{})
	time.AfterFunc(50*time.Millisecond, func() { stop.Set(1); close(set) })
	// spin never returns by itself: its return is the stop working (a
	// stop that failed would hang until the test's timeout).
	_, err := mod.ExportedFunction("spin").Call(context.Background())
	if err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("spin returned %v", err)
	}
	<-set // the guest saw the stop; the race detector does not know it
	stop.Set(0)
	if _, err := mod.ExportedFunction("sum").Call(context.Background(), 5); err != nil {
		t.Errorf("after a stop: %v", err)
	}
}

// TestStartExported: a start function does not run at instantiation; it
// is exported for the host to call under its guard.
func TestStartExported(t *testing.T) {
	src := `(module
	  (memory 1)
	  (global $ran (mut i32) (i32.const 0))
	  (func $init (global.set $ran (i32.const 1)))
	  (func (export "ran") (result i32) (global.get $ran))
	  (start $init))`
	mod, res := run(t, wat(t, src))
	if !res.HasStart {
		t.Fatal("start not reported")
	}
	ctx := context.Background()
	if out, _ := mod.ExportedFunction("ran").Call(ctx); out[0] != 0 {
		t.Fatal("the start function ran at instantiation")
	}
	if _, err := mod.ExportedFunction(StartExport).Call(ctx); err != nil {
		t.Fatal(err)
	}
	if out, _ := mod.ExportedFunction("ran").Call(ctx); out[0] != 1 {
		t.Fatal("the exported start function did not run")
	}
}

// TestSectionsCreated: a module without globals or exports gets both.
func TestSectionsCreated(t *testing.T) {
	mod, _ := run(t, wat(t, `(module (memory 1) (func (loop)))`))
	if mod.ExportedGlobal(StopGlobal) == nil {
		t.Fatal("no stop global")
	}
}

// TestImportedGlobalsAndMemory: index spaces count imports.
func TestImportedGlobalsAndMemory(t *testing.T) {
	src := `(module
	  (import "env" "g" (global $g i32))
	  (import "env" "mem" (memory 1))
	  (global $h (mut i32) (i32.const 5))
	  (func (export "f") (result i32)
	    (local $i i32)
	    (loop $l (local.set $i (i32.add (local.get $i) (i32.const 1))) (br_if $l (i32.lt_u (local.get $i) (i32.const 5000))))
	    (i32.add (i32.add (global.get $g) (global.get $h)) (local.get $i))))`
	res, err := Instrument(wat(t, src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCloseOnContextDone(false))
	defer rt.Close(ctx)
	env := wat(t, `(module (global (export "g") i32 (i32.const 100)) (memory (export "mem") 1))`)
	if _, err := rt.InstantiateWithConfig(ctx, env, wazero.NewModuleConfig().WithName("env")); err != nil {
		t.Fatal(err)
	}
	mod, err := rt.Instantiate(ctx, res.Module)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := mod.ExportedFunction("f").Call(ctx); err != nil || out[0] != 5105 {
		t.Errorf("f = %v, %v", out, err)
	}
}

// TestFeatures: instructions with every kind of immediate survive.
func TestFeatures(t *testing.T) {
	src := `(module
	  (type $t (func (param i32) (result i32)))
	  (memory 1) (table 2 funcref) (data "abcd") (elem (i32.const 0) $id)
	  (func $id (type $t) (local.get 0))
	  (func (export "f") (param $x i32) (result i32)
	    (local $v v128)
	    (local.set $v (v128.const i32x4 1 2 3 4))
	    (memory.fill (i32.const 100) (i32.const 7) (i32.const 10))
	    (memory.copy (i32.const 200) (i32.const 100) (i32.const 10))
	    (block $b
	      (loop $l
	        (br_table $b $l (i32.const 0))))
	    (i32.add
	      (i32.add (call_indirect (type $t) (local.get $x) (i32.const 0)) (i32.load8_u (i32.const 205)))
	      (i32x4.extract_lane 2 (local.get $v)))))`
	mod, _ := run(t, wat(t, src))
	if out, err := mod.ExportedFunction("f").Call(context.Background(), 10); err != nil || out[0] != 10+7+3 {
		t.Errorf("f = %v, %v", out, err)
	}
}

func TestRefuses(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   []byte
	}{
		{"not wasm", []byte("hello, world")},
		{"truncated", wat(t, loops)[:100]},
		{"no memory", wat(t, `(module (func (loop)))`)},
		{"our name taken", wat(t, `(module (memory 1) (func (export "compactd:stop")))`)},
		{"another of our names taken", wat(t, `(module (memory 1) (func (export "compactd:nop")))`)},
		// Invalid modules that the added functions and globals would make
		// valid, giving the guest a way to reset its budget or clear its
		// stop flag.
		{"a global it does not have", wat(t, `(module (memory 1) (func (global.set 1 (i64.const 9))))`, "--no-check")},
		{"a function it does not have", wat(t, `(module (memory 1) (func (call 3)))`, "--no-check")},
		{"an export of a global it does not have", wat(t, `(module (memory 1) (export "g" (global 2)))`, "--no-check")},
	} {
		if _, err := Instrument(tt.in, Options{}); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: err = %v", tt.name, err)
		}
	}
}

// TestPlugins instruments real plugin modules (Go and C) and checks that
// wazero compiles the result and that they still grow by little.
func TestPlugins(t *testing.T) {
	for _, rel := range []string{"plugins/sliding", "plugins/lastn/lastn.c"} {
		wasm, err := os.ReadFile(wasmbuild.ForTest(t, rel))
		if err != nil {
			t.Fatal(err)
		}
		var res *Result
		for _, keep := range []bool{false, true} {
			res, err = Instrument(wasm, Options{CallBudget: 1 << 20, StartBudget: 1 << 10, KeepStart: keep})
			if err != nil {
				t.Fatalf("%s: %v", rel, err)
			}
			fns, err := FunctionExports(res.Module)
			if err != nil || !fns["compact"] || !fns["describe"] || !fns[NopExport] {
				t.Errorf("%s: exports %v, %v", rel, fns, err)
			}
			ctx := context.Background()
			rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
			if _, err := rt.CompileModule(ctx, res.Module); err != nil {
				t.Errorf("%s: does not compile: %v", rel, err)
			}
			rt.Close(ctx)
		}
		if growth := len(res.Module) - len(wasm); growth > len(wasm)/20 {
			t.Errorf("%s grew by %d bytes", rel, growth)
		}
		t.Logf("%s: %d → %d bytes, %d loop headers", rel, len(wasm), len(res.Module), res.Loops)
	}
}

// FuzzInstrument: any input is refused or instrumented, never a panic;
// an instrumented valid module stays valid, and so does one with
// EntryLoops' loops.
func FuzzInstrument(f *testing.F) {
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x05\x03\x01\x00\x01\x0a\x07\x01\x05\x00\x03\x40\x0b\x0b"))
	f.Fuzz(func(t *testing.T, b []byte) {
		looped, lerr := EntryLoops(b)
		res, err := Instrument(b, Options{CallBudget: 3, StartBudget: 1 << 40})
		ctx := context.Background()
		rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
		defer rt.Close(ctx)
		if _, err := rt.CompileModule(ctx, b); err != nil {
			return // the input was not valid to begin with
		}
		if lerr != nil {
			t.Fatalf("EntryLoops refused a valid module %x: %v", b, lerr)
		}
		if _, err := rt.CompileModule(ctx, looped); err != nil {
			t.Fatalf("valid module %x became invalid with entry loops: %v", b, err)
		}
		if err != nil {
			return
		}
		if _, err := rt.CompileModule(ctx, res.Module); err != nil {
			t.Fatalf("valid module %x became invalid: %v", b, err)
		}
		if !bytes.Equal(res.Module[:8], b[:8]) {
			t.Fatal("header changed")
		}
	})
}

// TestMemoryMinPages reads the initial memory a module declares, as
// wazero does.
func TestMemoryMinPages(t *testing.T) {
	tests := []struct {
		name  string
		wasm  []byte
		pages uint32
		ok    bool
	}{
		// (module (memory 4097)): more than 256 MiB at start.
		{"big", []byte("\x00asm\x01\x00\x00\x00\x05\x04\x01\x00\x81\x20"), 4097, true},
		// (module (memory 1 2)).
		{"bounded", []byte("\x00asm\x01\x00\x00\x00\x05\x04\x01\x01\x01\x02"), 1, true},
		// (module): no memory.
		{"none", []byte("\x00asm\x01\x00\x00\x00"), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pages, ok, err := MemoryMinPages(tt.wasm)
			if err != nil || pages != tt.pages || ok != tt.ok {
				t.Errorf("got %d, %v, %v; want %d, %v", pages, ok, err, tt.pages, tt.ok)
			}
		})
	}
	if _, _, err := MemoryMinPages([]byte("nope")); err == nil {
		t.Error("not a module: no error")
	}
}

// recursion calls itself twice per level and loops nowhere: 2^n calls
// with no loop header for a check to sit on.
const recursion = `(module
  (memory 1)
  (func $f (export "f") (param $n i64) (result i64)
    (if (result i64) (i64.eqz (local.get $n))
      (then (i64.const 1))
      (else (i64.add
        (call $f (i64.sub (local.get $n) (i64.const 1)))
        (call $f (i64.sub (local.get $n) (i64.const 1))))))))`

// TestStopRecursion: a function checks the stop flag on entry too.
func TestStopRecursion(t *testing.T) {
	mod, _ := run(t, wat(t, recursion))
	f := mod.ExportedFunction("f")
	if out, err := f.Call(context.Background(), 10); err != nil || out[0] != 1024 {
		t.Fatalf("f(10) = %v, %v", out, err)
	}
	stop := mod.ExportedGlobal(StopGlobal).(api.MutableGlobal)
	set := make(chan struct{})
	time.AfterFunc(50*time.Millisecond, func() { stop.Set(1); close(set) })
	if _, err := f.Call(context.Background(), 64); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("f(64) returned %v", err)
	}
	<-set
}

// TestEntryLoops: with an empty loop at every function's entry, wazero's
// own checks (WithCloseOnContextDone) stop recursion that loops nowhere,
// compiled and interpreted, and the module still computes what it did.
func TestEntryLoops(t *testing.T) {
	module, err := EntryLoops(wat(t, recursion))
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []struct {
		name string
		rc   wazero.RuntimeConfig
	}{{"compiler", wazero.NewRuntimeConfigCompiler()}, {"interpreter", wazero.NewRuntimeConfigInterpreter()}} {
		t.Run(cfg.name, func(t *testing.T) {
			ctx := context.Background()
			rt := wazero.NewRuntimeWithConfig(ctx, cfg.rc.WithCloseOnContextDone(true))
			defer rt.Close(ctx)
			mod, err := rt.Instantiate(ctx, module)
			if err != nil {
				t.Fatal(err)
			}
			if out, err := mod.ExportedFunction("f").Call(ctx, 10); err != nil || out[0] != 1024 {
				t.Fatalf("f(10) = %v, %v", out, err)
			}
			tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			if _, err := mod.ExportedFunction("f").Call(tctx, 64); err == nil {
				t.Fatal("f(64) returned")
			}
		})
	}
	for _, src := range []string{loops, recursion} {
		m := wat(t, src)
		out, err := EntryLoops(m)
		if err != nil || len(out) <= len(m) {
			t.Errorf("EntryLoops: %d → %d bytes, %v", len(m), len(out), err)
		}
	}
}

// counted loops n times (forever if n is 0), counting its iterations in
// an exported global; _initialize and the start function loop like it.
const counted = `(module
  (memory 1)
  (global $n (export "n") (mut i64) (i64.const 0))
  (global $started (export "started") (mut i32) (i32.const 0))
  (func $loop (export "loop") (param $max i64)
    (global.set $n (i64.const 0))
    (loop $again
      (global.set $n (i64.add (global.get $n) (i64.const 1)))
      (br_if $again (i32.or (i64.eqz (local.get $max)) (i64.lt_u (global.get $n) (local.get $max))))))
  (func (export "_initialize") (call $loop (i64.const 0)))
  (func $start (global.set $started (i32.const 1)) (call $loop (i64.const 6000)))
  (start $start))`

// instrumented instantiates module instrumented with opts, without
// wazero's checks, on the compiler or the interpreter.
func instrumented(t *testing.T, module []byte, opts Options, interpreter bool) (api.Module, *Result, error) {
	t.Helper()
	res, err := Instrument(module, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rc := wazero.NewRuntimeConfigCompiler()
	if interpreter {
		rc = wazero.NewRuntimeConfigInterpreter()
	}
	rt := wazero.NewRuntimeWithConfig(ctx, rc.WithCloseOnContextDone(false))
	t.Cleanup(func() { rt.Close(ctx) })
	mod, err := rt.InstantiateWithConfig(ctx, res.Module, wazero.NewModuleConfig().WithStartFunctions())
	return mod, res, err
}

// outOfWork reports whether err is a trap whose innermost frame is the
// instrumented module's OutOfWork function, as wazero's stack trace
// names it.
func outOfWork(err error, res *Result) bool {
	if err == nil {
		return false
	}
	_, trace, ok := strings.Cut(err.Error(), "wasm stack trace:\n\t")
	first, _, _ := strings.Cut(trace, "\n")
	return ok && strings.HasSuffix(first, ".$"+strconv.Itoa(int(res.OutOfWork))+"()")
}

// TestBudget: a call that loops forever traps in OutOfWork after exactly
// CallBudget×Fuel steps, compiled and interpreted; every call from the
// host starts with the whole budget, so calls that each stay within it
// all succeed.
func TestBudget(t *testing.T) {
	for _, interp := range []bool{false, true} {
		t.Run(map[bool]string{false: "compiler", true: "interpreter"}[interp], func(t *testing.T) {
			mod, res, err := instrumented(t, wat(t, counted), Options{CallBudget: 3, StartBudget: 5}, interp)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			loop, n := mod.ExportedFunction("loop"), mod.ExportedGlobal("n")
			_, err = loop.Call(ctx, 0)
			if !outOfWork(err, res) {
				t.Fatalf("an endless loop: %v, want a trap in OutOfWork ($%d)", err, res.OutOfWork)
			}
			// The check sits at the loop header, before the body: the
			// 3×Fuel-th step traps before its iteration counts.
			if got := n.Get(); got != 3*Fuel-1 {
				t.Errorf("stopped after %d iterations, want %d", got, 3*Fuel-1)
			}
			if left := mod.ExportedGlobal(BudgetGlobal).Get(); left != 0 {
				t.Errorf("budget left: %d", left)
			}
			// A fresh instance: calls of 2×Fuel steps each, more than the
			// budget together.
			mod, _, err = instrumented(t, wat(t, counted), Options{CallBudget: 3, StartBudget: 5}, interp)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 5; i++ {
				if _, err := mod.ExportedFunction("loop").Call(ctx, 2*Fuel); err != nil {
					t.Fatalf("call %d within its budget: %v", i, err)
				}
			}
			// _initialize runs under StartBudget; its entry (it calls)
			// is one step.
			_, err = mod.ExportedFunction("_initialize").Call(ctx)
			if !outOfWork(err, res) || mod.ExportedGlobal("n").Get() != 5*Fuel-2 {
				t.Errorf("_initialize: %v after %d iterations, want a trap after %d", err, mod.ExportedGlobal("n").Get(), 5*Fuel-2)
			}
		})
	}
}

// TestBudgetZeroIsUnlimited: a zero budget never traps (2^64 refills).
func TestBudgetZeroIsUnlimited(t *testing.T) {
	mod, _, err := instrumented(t, wat(t, counted), Options{}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mod.ExportedFunction("loop").Call(context.Background(), 100*Fuel); err != nil {
		t.Fatal(err)
	}
}

// TestStartBudget: a start function left in place (KeepStart) runs at
// instantiation under StartBudget; exported (StartExport), it runs under
// StartBudget when the host calls it.
func TestStartBudget(t *testing.T) {
	ctx := context.Background()
	// The start function takes 6001 steps (its entry, which calls, and
	// 6000 iterations): more than 5 refills, fewer than 6.
	_, res, err := instrumented(t, wat(t, counted), Options{StartBudget: 5, KeepStart: true}, false)
	if !outOfWork(err, res) {
		t.Fatalf("a start function over its budget, kept: instantiation = %v", err)
	}
	mod, _, err := instrumented(t, wat(t, counted), Options{StartBudget: 6, KeepStart: true}, false)
	if err != nil || mod.ExportedGlobal("started").Get() != 1 || mod.ExportedFunction(StartExport) != nil {
		t.Fatalf("a start function within its budget, kept: %v", err)
	}
	mod, res, err = instrumented(t, wat(t, counted), Options{StartBudget: 5, CallBudget: 100}, true)
	if err != nil || mod.ExportedGlobal("started").Get() != 0 {
		t.Fatalf("instantiating with the start function exported: %v", err)
	}
	if _, err := mod.ExportedFunction(StartExport).Call(ctx); !outOfWork(err, res) {
		t.Fatalf("an exported start function over its budget: %v", err)
	}
}

// TestNop: the nop export does nothing, and costs no budget.
func TestNop(t *testing.T) {
	mod, _, err := instrumented(t, wat(t, counted), Options{CallBudget: 1, StartBudget: 1}, false)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := mod.ExportedFunction(NopExport).Call(context.Background()); err != nil || len(out) != 0 {
		t.Fatalf("nop = %v, %v", out, err)
	}
}

// TestWrapperKeepsResults: a wrapped export takes its parameters and
// returns its results as before, multi-value included.
func TestWrapperKeepsResults(t *testing.T) {
	mod, _, err := instrumented(t, wat(t, `(module (memory 1)
	  (func (export "swap") (param i32 i64) (result i64 i32) (local.get 1) (local.get 0)))`), Options{CallBudget: 1}, false)
	if err != nil {
		t.Fatal(err)
	}
	out, err := mod.ExportedFunction("swap").Call(context.Background(), 7, 9)
	if err != nil || len(out) != 2 || out[0] != 9 || out[1] != 7 {
		t.Fatalf("swap(7, 9) = %v, %v", out, err)
	}
}
