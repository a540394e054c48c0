package wasminstr

import (
	"errors"
	"testing"
)

// TestScan counts the shape of modules written by hand, hostile ones
// included: the counts come from the declarations alone, whatever they
// declare, and a module that ends mid-section is refused.
func TestScan(t *testing.T) {
	t.Parallel()
	// Sections: type [] -> [] and [i32 i64] -> [i32]; an import of a
	// function and of a table of 7; 2 functions; a table of 5; an
	// export; code: one body declaring 50,000,000 i64 and 3 i32 locals
	// (4 bytes of code), one empty.
	mod := []byte("\x00asm\x01\x00\x00\x00")
	mod = append(mod, 1, 10, 2, 0x60, 0, 0, 0x60, 2, 0x7f, 0x7e, 1, 0x7f)
	mod = append(mod, 2, 15, 2, 1, 'm', 1, 'f', 0, 0, 1, 'm', 1, 't', 1, 0x70, 0, 7)
	mod = append(mod, 3, 3, 2, 0, 1)
	mod = append(mod, 4, 4, 1, 0x70, 0, 5)
	mod = append(mod, 7, 5, 1, 1, 'x', 0, 1)
	mod = append(mod, 10, 16, 2, 10, 2, 0x80, 0xe1, 0xeb, 0x17, 0x7e, 3, 0x7f, 1, 0x0b, 3, 0, 0x01, 0x0b)
	got, err := Scan(mod)
	if err != nil {
		t.Fatal(err)
	}
	want := Shape{Types: 2, TypeValues: 3, MaxTypeValues: 3, Imports: 2, ImportedFuncs: 1, Functions: 2,
		Locals: 50_000_003, MaxLocals: 50_000_003, CodeBytes: 13, MaxBodyBytes: 10, TableEntries: 12, Exports: 1}
	if got != want {
		t.Errorf("Scan:\n got %+v\nwant %+v", got, want)
	}
	for _, tc := range []struct {
		name string
		mod  []byte
	}{
		{"not wasm", []byte("hello, world")},
		{"cut in the code", mod[:len(mod)-3]},
		{"a body past its section", append(append([]byte{}, mod[:len(mod)-18]...), 10, 4, 1, 0xff, 0xff, 0x03)},
		{"more bodies than functions", append(append([]byte{}, mod[:len(mod)-18]...), 10, 5, 3, 2, 0, 0x0b, 0)},
	} {
		if _, err := Scan(tc.mod); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v; want ErrUnsupported", tc.name, err)
		}
	}
}
