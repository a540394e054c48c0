package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/internal/eval"
	"github.com/compactd/compactd/internal/plugtest"
)

var replayConfig = flag.String("cfg", "", "config overrides for -replay, as JSON")

var replayLost = flag.String("lost", "", "with -replay: write every lost probe to this file (kind, position, request, text)")

var replayFiles = flag.String("replay", "", "replay these files of the full data set (comma-separated base names, \"all\") natively and print tokens and retention")

// TestReplayFull is a quick native measurement for tuning (the numbers
// that count are `compactd eval`'s): tokens sent against the uncompressed
// requests, and retention of eval's probes on every request, by position
// and kind. Run with -replay all (needs the full data set).
func TestReplayFull(t *testing.T) {
	if *replayFiles == "" {
		t.Skip("pass -replay FILES")
	}
	var names []string
	if *replayFiles != "all" {
		names = splitComma(*replayFiles)
	}
	convs := plugtest.LoadFull(t, true, names...)
	byFile := map[string][]plugtest.Conversation{}
	for _, c := range convs {
		byFile[c.File] = append(byFile[c.File], c)
	}
	var files []string
	for f := range byFile {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		cs := byFile[f]
		var ret eval.Retention
		var kept, turns int
		var fixed, ledgerTok, tailTok, newestTok int
		sets := map[string]*eval.ProbeSet{}
		var lost strings.Builder
		var cfg map[string]any
		if *replayConfig != "" {
			if err := json.Unmarshal([]byte(*replayConfig), &cfg); err != nil {
				t.Fatal(err)
			}
		}
		st := plugtest.Replay(t, compact, cs, cfg, func(tr *plugtest.Turn) {
			turns++
			pinned := convoPinned(tr.Request.Messages)
			for i, it := range tr.Result.Messages {
				switch {
				case i < pinned:
					fixed += tr.Out[i].Tokens
				case !it.IsRef():
					ledgerTok += tr.Out[i].Tokens
				default:
					tailTok += tr.Out[i].Tokens
					if tr.Result.Messages[i].Ref >= lastUnit(tr.Request.Messages) {
						newestTok += tr.Out[i].Tokens
					}
				}
			}
			if convoTask(tr.Request.Messages, tr.Out) {
				kept++
			}
			// Every request against probes of its own history, as eval
			// checks them.
			ps := sets[tr.Conv.ID]
			if ps == nil {
				ps = eval.NewProbeSet(tr.Conv.Messages, tr.Conv.ID, eval.ProbeOptions{})
				sets[tr.Conv.ID] = ps
			}
			r := ps.Retain(ps.Draw(tr.N), tr.Out)
			for _, p := range r.Lost {
				fmt.Fprintf(&lost, "%s\t%s\t%s\t%d\t%q\n", p.Kind, p.Position, tr.Conv.ID, p.At, p.Text)
			}
			ret.Add(r)
		})
		if *replayLost != "" {
			if err := os.WriteFile(*replayLost+"."+f, []byte(lost.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		var by string
		for _, pos := range eval.Positions {
			v := ret.ByPosition[pos]
			by += fmt.Sprintf(" %s %d/%d", pos, v[1], v[0])
		}
		for _, k := range eval.ProbeKinds {
			v := ret.ByKind[k]
			by += fmt.Sprintf(" %s %d/%d", k, v[1], v[0])
		}
		t.Logf("%s: tokens %.3f (of the uncompressed: pinned %.3f, ledger %.3f, verbatim turns %.3f, the newest %.3f), extended %.1f%%, task %d/%d, retention %.1f%% (%s)", f,
			float64(st.TokensAfter)/float64(st.TokensBefore), float64(fixed)/float64(st.TokensBefore), float64(ledgerTok)/float64(st.TokensBefore), float64(tailTok)/float64(st.TokensBefore), float64(newestTok)/float64(st.TokensBefore),
			100*st.Unchanged(), kept, turns, 100*ret.Share(), by)
	}
}

// lastUnit is where the last turn unit of msgs starts.
func lastUnit(msgs []abi.Message) int {
	units := convo.Units(msgs)
	if len(units) == 0 {
		return 0
	}
	return units[len(units)-1].Start
}

func convoPinned(msgs []abi.Message) int { return convo.Pinned(msgs, true) }

func convoTask(in, out []abi.Message) bool {
	for i := range in {
		if in[i].Role == abi.RoleUser {
			for j := range out {
				if plugtest.SameMessage(&in[i], &out[j]) {
					return true
				}
			}
			return false
		}
	}
	return true
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

var _ = chat.ErrInvalid
