package server

import (
	"strconv"

	"github.com/compactd/compactd/client"
)

// shadowTable is the status page's side-by-side view of a Shadow: one
// row per way of sending the requests (live, full, each shadow), each
// figure with its ratio to sending everything.
type shadowTable struct {
	// Key prefixes the rows' data-k ("totals" or "conv:ID").
	Key        string
	CostModels []client.ShadowCostModel
	Rows       []shadowRow
}

// shadowRow is one way's figures, formatted.
type shadowRow struct {
	// Name is "live", "full" or the shadow pipeline; Label says it for
	// people; Shadow marks a shadow pipeline's row (it has outcomes).
	Name, Label string
	Shadow      bool
	client.ShadowFigures
	Compacted, Failed, Dropped int
	// TokensRatio and CostRatios compare with the full row ("0.41×").
	TokensRatio string
	Costs       []shadowCost
	// Kept is the identifiers kept, as a share of those looked for.
	Kept string
}

type shadowCost struct{ USD, Ratio string }

// shadowTableOf lays a Shadow out for the page (nil: no table).
func shadowTableOf(key string, sh *client.Shadow) *shadowTable {
	if sh == nil {
		return nil
	}
	t := &shadowTable{Key: key, CostModels: sh.CostModels}
	row := func(name, label string, f client.ShadowFigures) shadowRow {
		r := shadowRow{Name: name, Label: label, ShadowFigures: f, TokensRatio: ratio(float64(f.TokensSent), float64(sh.Full.TokensSent)), Kept: "–"}
		for i := range sh.CostModels {
			var c, full float64
			if i < len(f.CostsUSD) {
				c = f.CostsUSD[i]
			}
			if i < len(sh.Full.CostsUSD) {
				full = sh.Full.CostsUSD[i]
			}
			r.Costs = append(r.Costs, shadowCost{USD: formatUSD(c), Ratio: ratio(c, full)})
		}
		if f.Probes > 0 {
			r.Kept = strconv.FormatFloat(100*float64(f.ProbesKept)/float64(f.Probes), 'f', 1, 64) + "%"
		}
		return r
	}
	t.Rows = append(t.Rows, row("live", "live (what was forwarded)", sh.Live), row("full", "sending everything", sh.Full))
	for _, p := range sh.Pipelines {
		r := row(p.Pipeline, p.Pipeline, p.ShadowFigures)
		r.Shadow, r.Compacted, r.Failed, r.Dropped = true, p.Compacted, p.Failed, p.Dropped
		t.Rows = append(t.Rows, r)
	}
	return t
}

// ratio is a/b as "0.41×" ("–" when b is 0).
func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64) + "×"
}
