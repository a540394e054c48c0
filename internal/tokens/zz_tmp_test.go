package tokens

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dlclark/regexp2/v2"
)

const o200kPat = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
const cl100kPat = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

func split(t *testing.T, re *regexp2.Regexp, s string) []string {
	var out []string
	m, err := re.FindStringMatch(s)
	for m != nil && err == nil {
		out = append(out, m.String())
		m, err = re.FindNextMatch(m)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestZZSplit(t *testing.T) {
	for _, pat := range []string{o200kPat, cl100kPat} {
		gen := regexp2.MustCompile(pat, regexp2.None)
		interp := regexp2.MustCompile("(?:"+pat+")", regexp2.None)
		alphabet := []rune{}
		for r := rune(0); r < 128; r++ {
			alphabet = append(alphabet, r)
		}
		alphabet = append(alphabet, 'é', 'É', 'ß', '生', 'ǅ', '\u0301', '\u00a0', '\u2028', '٣', '\u200b', 'ー', 'ʰ', '\u0085')
		bad := map[string]bool{}
		rng := rand.New(rand.NewPCG(1, 2))
		for i := 0; i < 300000; i++ {
			var b strings.Builder
			for range 1 + rng.IntN(6) {
				b.WriteRune(alphabet[rng.IntN(len(alphabet))])
			}
			s := b.String()
			a, c := split(t, gen, s), split(t, interp, s)
			if strings.Join(a, "|") != strings.Join(c, "|") || len(a) != len(c) {
				if strings.ContainsRune(s, 0x7f) {
					bad["DEL"] = true
					continue
				}
				if len(bad) < 10 {
					t.Errorf("%q: gen %q interp %q", s, a, c)
				}
				bad[s] = true
			}
		}
		t.Logf("mismatch kinds: %d (DEL: %v)", len(bad), bad["DEL"])
	}
}

func TestZZCommon(t *testing.T) {
	for _, pat := range []string{o200kPat, cl100kPat} {
		gen := regexp2.MustCompile(pat, regexp2.None)
		interp := regexp2.MustCompile("(?:"+pat+")", regexp2.None)
		for _, s := range []string{"a\n  \nb", "x\n    \n    y", "\r\n", "a\r\n\r\nb", "a \n b", "a\t\n\tb", "def f():\n    pass\n\n\n    \n  x", "} \n", "a\n\n\n", " \n \n"} {
			a, c := split(t, gen, s), split(t, interp, s)
			t.Logf("%q: gen %q interp %q same=%v", s, a, c, strings.Join(a, "\x00") == strings.Join(c, "\x00"))
		}
	}
}
