package eval

import (
	"encoding/json"
	"fmt"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/chat"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/internal/tokens"
)

// Biller prices a session's requests one by one, as `compactd eval` does:
// each request as sent is compared with the previous one of the same
// session (its byte-identical leading messages, and the cache entries it
// left), and billed under each cost model's prompt-cache rules, counted
// with that model's tokenizer. The eval runner and the proxy's shadow
// policies share it, so a shadow's figures are the eval's.
//
// A Biller holds no session state (Sent does) and is safe for concurrent
// use.
type Biller struct {
	costs []costModel
}

// NewBiller returns a Biller that prices requests under the named cost
// models of the pricing table (empty: its Compare models), each counted
// with its model's tokenizer from counter.
func NewBiller(p *Pricing, models []string, counter *tokens.Counter) (*Biller, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: no pricing table", ErrOptions)
	}
	if len(models) == 0 {
		models = p.Compare
	}
	b := &Biller{}
	seen := map[string]bool{}
	for _, n := range models {
		if seen[n] {
			continue
		}
		seen[n] = true
		pm, err := p.Lookup(n)
		if err != nil {
			return nil, err
		}
		b.costs = append(b.costs, costModel{PricedModel: pm, tok: counter.ForModel(n)})
	}
	return b, nil
}

// Models returns the cost models, in the order of Bill.Usages.
func (b *Biller) Models() []PricedModel {
	out := make([]PricedModel, len(b.costs))
	for i, cm := range b.costs {
		out[i] = cm.PricedModel
	}
	return out
}

// Sent is a request as billed, which the next request of its session is
// compared with. A nil *Sent is the start of a session.
type Sent struct {
	raw []json.RawMessage
	// alive holds, per cost model, the cache entries the request left
	// (Rules.Entries).
	alive [][]int
}

// Bill is one request's bill.
type Bill struct {
	// PrefixMessages and Prefix: the leading whole messages the request
	// shares, byte for byte, with the previous request as sent, and their
	// tokens (counted by the tokenizer Bill was given).
	PrefixMessages, Prefix int
	// PrevKept: the previous request as sent is a prefix of this one.
	PrevKept bool
	// Usages is the request split the way each cost model bills it, in
	// the order of Models.
	Usages []Usage
}

// Bill bills the request out, sent after prev (nil: the session's first
// request), and returns the bill and out as the previous request for the
// next one. marks are the messages the policy marked as cache breakpoints
// (nil when the request did not ask); reply, if not nil, is the model's
// answer, billed as output. tok is the agent's model's tokenizer: it
// counts the messages whose Tokens are 0 (storing the count in out), and
// the Prefix figure.
func (b *Biller) Bill(tok *tokens.Tokenizer, prev *Sent, out *chat.Conversation, marks []int, reply *abi.Message) (Bill, *Sent) {
	cur := &Sent{raw: out.Raw, alive: make([][]int, len(b.costs))}
	own := make([]int, out.Len())
	blocks := make([]int, out.Len())
	for i := range out.Messages {
		if out.Messages[i].Tokens == 0 {
			out.Messages[i].Tokens = tok.CountMessage(&out.Messages[i])
		}
		own[i] = out.Messages[i].Tokens
		blocks[i] = Blocks(&out.Messages[i])
	}
	var bill Bill
	if prev != nil {
		bill.PrefixMessages, bill.Prefix = CommonPrefix(prev.raw, out.Raw, own)
		bill.PrevKept = bill.PrefixMessages == len(prev.raw)
	}
	breaks := Breakpoints(out.Len(), convo.LeadingSystem(out.Messages), marks)
	bill.Usages = make([]Usage, len(b.costs))
	for k, cm := range b.costs {
		toks := own
		if cm.tok != tok {
			toks = make([]int, out.Len())
			for i := range out.Messages {
				toks[i] = cm.tok.CountMessage(&out.Messages[i])
			}
		}
		q := Request{Priming: tokens.ReplyPrimingTokens, First: prev == nil,
			Messages: toks, Blocks: blocks, Breakpoints: breaks, PrefixMessages: bill.PrefixMessages}
		if reply != nil {
			q.Output = cm.tok.CountMessage(reply)
		}
		for i, n := range toks {
			q.Tokens += n
			if i < bill.PrefixMessages {
				q.Prefix += n
			}
		}
		if prev != nil {
			q.Alive = prev.alive[k]
		}
		bill.Usages[k] = cm.Rules.Split(q)
		cur.alive[k] = cm.Rules.Entries(q)
	}
	return bill, cur
}

// Costs prices a bill's usages, in the order of Models.
func (b *Biller) Costs(bill Bill) []float64 {
	out := make([]float64, len(b.costs))
	for k, cm := range b.costs {
		if k < len(bill.Usages) {
			out[k] = cm.Price.Cost(bill.Usages[k])
		}
	}
	return out
}
