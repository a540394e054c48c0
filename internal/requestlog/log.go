package requestlog

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactd/compactd/internal/store"
	"github.com/compactd/compactd/jsonscan"
	"github.com/hashicorp/go-hclog"
)

// Defaults of Options.
const (
	DefaultMax             = 10_000
	DefaultPerConversation = 500
	// storeQueue is how many records may wait for the store; past it a
	// record is kept in memory and the file only (counted in Stats).
	storeQueue = 1024
)

// BucketName is the state store bucket the records are copied into.
const BucketName = "requests"

// Options configure a Log.
type Options struct {
	// Max bounds the records held in memory; PerConversation bounds one
	// conversation's, in memory and in the store.
	Max, PerConversation int
	// Store, if set, receives each conversation's latest records (a
	// bucket of at most MaxConversations conversations, expiring after
	// TTL like the rest of the store).
	Store            store.Backend
	MaxConversations int
	TTL              time.Duration
	// FlushInterval is how long the store writer gathers records before
	// it writes them, one store update per conversation (default
	// store.DefaultFlushInterval, as the store's own counters). A crash
	// loses at most that much of the store's copy; Flush and Close write
	// at once.
	FlushInterval time.Duration
	// File, if set, gets every record as a JSON line.
	File   *File
	Logger hclog.Logger
}

// Log is the request log. It is safe for concurrent use.
type Log struct {
	opts     Options
	instance string
	seq      atomic.Uint64
	logger   hclog.Logger

	mu    sync.Mutex
	convs map[string][]entry
	fifo  []slot // one per record added, oldest first (some already dropped)
	total int

	kv       store.KV
	qmu      sync.RWMutex // held to send on queue; Close takes it to close queue
	queue    chan queued
	done     chan struct{}
	dropped  atomic.Uint64
	failures atomic.Uint64
}

// queued is a record for the store writer, or (ack set) a Flush marker.
type queued struct {
	rec Record
	ack chan struct{}
}

type entry struct {
	seq uint64
	rec Record
}

type slot struct {
	conv string
	seq  uint64
}

// New returns a Log; Close stops its store writer and closes its file.
func New(opts Options) (*Log, error) {
	if opts.Max <= 0 {
		opts.Max = DefaultMax
	}
	if opts.PerConversation <= 0 {
		opts.PerConversation = DefaultPerConversation
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = store.DefaultFlushInterval
	}
	var b [4]byte
	rand.Read(b[:])
	l := &Log{opts: opts, instance: hex.EncodeToString(b[:]), logger: opts.Logger, convs: map[string][]entry{}}
	if l.logger == nil {
		l.logger = hclog.NewNullLogger()
	}
	if opts.Store != nil {
		kv, err := opts.Store.OpenBucket(BucketName, store.BucketOptions{MaxEntries: opts.MaxConversations, TTL: opts.TTL})
		if err != nil {
			return nil, fmt.Errorf("request log: opening the store bucket: %w", err)
		}
		l.kv, l.queue, l.done = kv, make(chan queued, storeQueue), make(chan struct{})
		go l.writeStore(l.queue)
	}
	return l, nil
}

// Add records r: it gets its ID, and its Time if unset.
func (l *Log) Add(r Record) {
	seq := l.seq.Add(1)
	r.ID = l.instance + "-" + strconv.FormatUint(seq, 10)
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	l.mu.Lock()
	conv := r.ConversationID
	list := append(l.convs[conv], entry{seq, r})
	l.total++
	if over := len(list) - l.opts.PerConversation; over > 0 {
		// The oldest go by re-slicing, not by moving the rest down (a
		// conversation at its bound would copy every record it holds on
		// every request); append gives the array back once it is full.
		clear(list[:over])
		list = list[over:]
		l.total -= over
	}
	l.convs[conv] = list
	l.fifo = append(l.fifo, slot{conv, seq})
	for l.total > l.opts.Max && len(l.fifo) > 0 {
		s := l.fifo[0]
		l.fifo = l.fifo[1:]
		if cl := l.convs[s.conv]; len(cl) > 0 && cl[0].seq == s.seq {
			l.drop(s.conv, cl)
		}
	}
	if len(l.fifo) > 2*l.opts.Max+64 {
		l.fifo = slices.DeleteFunc(l.fifo, func(s slot) bool {
			cl := l.convs[s.conv]
			return len(cl) == 0 || s.seq < cl[0].seq
		})
	}
	l.mu.Unlock()

	if l.opts.File != nil {
		if err := l.opts.File.Write(&r); err != nil {
			l.failures.Add(1)
			l.logger.Warn("request log: writing the access file", "error", err)
		}
	}
	if conv != "" {
		l.qmu.RLock()
		if l.queue != nil {
			select {
			case l.queue <- queued{rec: r}:
			default:
				l.dropped.Add(1)
			}
		}
		l.qmu.RUnlock()
	}
}

// drop removes the oldest of a conversation's records (l.mu held).
func (l *Log) drop(conv string, cl []entry) {
	cl[0] = entry{}
	if len(cl) == 1 {
		delete(l.convs, conv)
	} else {
		l.convs[conv] = cl[1:]
	}
	l.total--
}

// writeStore copies queued records into the store, in batches: a batch
// gathers for up to FlushInterval after its first record (or until it
// holds maxBatch records, or a Flush marker comes), then goes at once, one
// store update per conversation (its records in the order they came).
// Each update rewrites the conversation's stored list, so writing a busy
// conversation's records one by one would cost a rewrite per request.
func (l *Log) writeStore(queue <-chan queued) {
	defer close(l.done)
	var batch []queued
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	write := func() {
		timer.Stop()
		l.writeBatch(batch)
		batch = nil
	}
	for {
		select {
		case q, ok := <-queue:
			if !ok {
				if len(batch) > 0 {
					write()
				}
				return
			}
			batch = append(batch, q)
			switch {
			case q.ack != nil || len(batch) >= maxBatch:
				write()
			case len(batch) == 1:
				timer.Reset(l.opts.FlushInterval)
			}
		case <-timer.C:
			if len(batch) > 0 {
				write()
			}
		}
	}
}

// maxBatch bounds the records one batch writes (and holds in memory,
// about 300 bytes each). A batch writes each of its conversations once,
// so the bound is high: requests that come from many conversations at
// once (agents side by side, out of order) would otherwise cost a store
// update per conversation every few hundred requests.
const maxBatch = 4096

// writeBatch writes a batch's records, then answers its Flush markers
// (every record queued before a marker is then written). A store that
// can update several keys at once (store.MultiUpdater: bbolt) writes the
// whole batch in one transaction, one sync to disk, rather than one per
// conversation: requests from many conversations at once (agents side by
// side) would otherwise cost a sync per conversation every batch.
func (l *Log) writeBatch(batch []queued) {
	var order []string
	byConv := map[string][]Record{}
	var acks []chan struct{}
	for _, q := range batch {
		if q.ack != nil {
			acks = append(acks, q.ack)
			continue
		}
		id := q.rec.ConversationID
		if _, ok := byConv[id]; !ok {
			order = append(order, id)
		}
		byConv[id] = append(byConv[id], q.rec)
	}
	if mu, ok := l.kv.(store.MultiUpdater); ok && len(order) > 1 {
		for len(order) > 0 {
			ids := order[:min(len(order), maxPerWrite)]
			order = order[len(ids):]
			if err := l.appendStoreMany(mu, ids, byConv); err != nil {
				n := 0
				for _, id := range ids {
					n += len(byConv[id])
				}
				l.failures.Add(uint64(n))
				l.logger.Warn("request log: writing to the store", "conversations", len(ids), "records", n, "error", err)
			}
		}
	} else {
		for _, id := range order {
			if err := l.appendStore(id, byConv[id]); err != nil {
				l.failures.Add(uint64(len(byConv[id])))
				l.logger.Warn("request log: writing to the store", "conversation", id, "records", len(byConv[id]), "error", err)
			}
		}
	}
	for _, ack := range acks {
		close(ack)
	}
}

// maxPerWrite bounds the conversations one store write (UpdateMany)
// appends to: a transaction holds every list it rewrites in memory until
// it commits (a full list is about 150 KB), so a batch of many
// conversations goes in several writes of at most this many.
const maxPerWrite = 64

// appendStore adds recs to conversation id's list in the store, keeping
// its last PerConversation records. The store's Update makes the append
// atomic: replicas appending to one conversation at once lose nothing.
func (l *Log) appendStore(id string, recs []Record) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return l.kv.Update(ctx, []byte(id), func(old []byte) ([]byte, error) {
		return appendRecords(old, recs, l.opts.PerConversation)
	})
}

// appendStoreMany is appendStore for several conversations in one store
// write.
func (l *Log) appendStoreMany(mu store.MultiUpdater, ids []string, byConv map[string][]Record) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	keys := make([][]byte, len(ids))
	for i, id := range ids {
		keys[i] = []byte(id)
	}
	return mu.UpdateMany(ctx, keys, func(i int, old []byte) ([]byte, error) {
		return appendRecords(old, byConv[ids[i]], l.opts.PerConversation)
	})
}

// A stored list is a JSON array of records, one record a line:
//
//	[
//	{"id":...},
//	{"id":...}
//	]
//
// A record encoded by encoding/json holds no raw newline, so the records
// of a list in this layout are found (counted, the oldest dropped)
// without reading them: appending to a busy conversation's list, which
// every batch of the store writer does, costs a copy of its bytes, not a
// parse. It is still one JSON array (what List and another replica
// read); a list in any other form (a version before this layout wrote
// it on one line) is read record by record and rewritten in this one.
const (
	listOpen  = "[\n"
	listSep   = ",\n"
	listClose = "\n]"
)

// appendRecords returns the stored list old (a JSON array of records)
// with recs appended, keeping its last limit records. The records already
// stored are kept as their bytes, not decoded and encoded again: a busy
// conversation's list holds hundreds, and every batch of the store
// writer appends to it. A list that is not an array of objects is
// unreadable and starts over.
func appendRecords(old []byte, recs []Record, limit int) ([]byte, error) {
	if len(recs) > limit {
		recs = recs[len(recs)-limit:]
	}
	fresh := make([][]byte, len(recs))
	size := len(listOpen) + len(listClose)
	for i := range recs {
		b, err := json.Marshal(&recs[i])
		if err != nil {
			return nil, err
		}
		fresh[i] = b
		size += len(b) + len(listSep)
	}
	keep := limit - len(recs)
	var kept []byte // the kept records, as stored: "{...},\n{...}"
	if inner, n, ok := listLines(old); ok {
		for ; n > keep; n-- {
			i := bytes.Index(inner, []byte(listSep))
			if i < 0 {
				inner = nil
				break
			}
			inner = inner[i+len(listSep):]
		}
		if keep == 0 {
			inner = nil
		}
		kept = inner
	} else {
		recs := storedRecords(old)
		if over := len(recs) - keep; over > 0 {
			recs = recs[over:]
		}
		for i, r := range recs {
			if i > 0 {
				kept = append(kept, listSep...)
			}
			if bytes.IndexByte(r, '\n') >= 0 { // written with line breaks: one line now
				var b bytes.Buffer
				if json.Compact(&b, r) == nil {
					r = b.Bytes()
				}
			}
			kept = append(kept, r...)
		}
	}
	size += len(kept)
	out := make([]byte, 0, size)
	out = append(out, listOpen...)
	out = append(out, kept...)
	for _, r := range fresh {
		if len(out) > len(listOpen) {
			out = append(out, listSep...)
		}
		out = append(out, r...)
	}
	return append(out, listClose...), nil
}

// listLines returns the records of a list in the one-a-line layout (their
// bytes between the brackets, a view of old) and how many there are; ok
// is false when old is not in that layout: every line break must sit
// between one record's "}," and the next one's "{".
func listLines(old []byte) (inner []byte, n int, ok bool) {
	if !bytes.HasPrefix(old, []byte(listOpen+"{")) || !bytes.HasSuffix(old, []byte("}"+listClose)) || len(old) < len(listOpen)+len("{}")+len(listClose) {
		return nil, 0, false
	}
	inner = old[len(listOpen) : len(old)-len(listClose)]
	n = 1
	for rest, at := inner, 0; ; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			return inner, n, true
		}
		at += i
		if at < 2 || at+1 >= len(inner) || inner[at-2] != '}' || inner[at-1] != ',' || inner[at+1] != '{' {
			return nil, 0, false
		}
		n++
		rest, at = inner[at+1:], at+1
	}
}

// storedRecords splits a stored list into its records' bytes (views of
// old); nil when old is absent or not a JSON array of objects.
func storedRecords(old []byte) [][]byte {
	if old == nil {
		return nil
	}
	s := jsonscan.New(old)
	if s.Peek() != jsonscan.Array {
		return nil
	}
	s.BeginArray()
	var out [][]byte
	for first := true; ; first = false {
		more, err := s.NextElement(first)
		if err != nil {
			return nil
		}
		if !more {
			break
		}
		kind, start, end, err := s.Skip()
		if err != nil || kind != jsonscan.Object {
			return nil
		}
		out = append(out, old[start:end])
	}
	if s.End() != nil {
		return nil
	}
	return out
}

// Page is one page of a listing, newest first; NextCursor is set when
// there are older records.
type Page struct {
	Requests   []Record `json:"requests"`
	NextCursor string   `json:"next_cursor,omitempty"`
	// Warning says the store could not be read: the page holds this
	// daemon's records only.
	Warning string `json:"warning,omitempty"`
}

// List returns up to limit records older than cursor, newest first: one
// conversation's (this daemon's and, with a store, every replica's), or
// with conversation "" every record this daemon holds. The only error is
// a cursor no listing returned; a store that cannot be read leaves the
// page with this daemon's records and a Warning.
func (l *Log) List(ctx context.Context, conversation string, limit int, cursor string) (Page, error) {
	c, err := ParseCursor(cursor)
	if err != nil {
		return Page{}, err
	}
	var recs []Record
	l.mu.Lock()
	if conversation != "" {
		for _, e := range l.convs[conversation] {
			recs = append(recs, e.rec)
		}
	} else {
		for _, cl := range l.convs {
			for _, e := range cl {
				recs = append(recs, e.rec)
			}
		}
	}
	l.mu.Unlock()
	var p Page
	if conversation != "" && l.kv != nil {
		b, err := l.kv.Get(ctx, []byte(conversation))
		if err != nil {
			p.Warning = fmt.Sprintf("the state store could not be read (%v): this daemon's records only", err)
		}
		var stored []Record
		if b != nil && json.Unmarshal(b, &stored) == nil {
			seen := make(map[string]bool, len(recs))
			for _, r := range recs {
				seen[r.ID] = true
			}
			for _, r := range stored {
				if !seen[r.ID] {
					recs = append(recs, r)
				}
			}
		}
	}
	slices.SortFunc(recs, func(a, b Record) int {
		if newer(&a, &b) {
			return -1
		}
		return 1
	})
	if conversation != "" && len(recs) > l.opts.PerConversation {
		recs = recs[:l.opts.PerConversation] // memory and store together: still the newest PerConversation
	}
	recs = slices.DeleteFunc(recs, func(r Record) bool { return !c.past(&r) })
	if len(recs) > limit {
		recs = recs[:limit]
		p.NextCursor = CursorOf(&recs[limit-1])
	}
	p.Requests = recs
	if p.Requests == nil {
		p.Requests = []Record{}
	}
	return p, nil
}

// Stats are the log's counters.
type Stats struct {
	Held int `json:"held"`
	// StoreDropped counts records not copied to the store because its
	// writer was behind; Failures writes to the store or file that failed.
	StoreDropped uint64 `json:"store_dropped"`
	Failures     uint64 `json:"failures"`
}

// Stats returns the log's counters.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	n := l.total
	l.mu.Unlock()
	return Stats{Held: n, StoreDropped: l.dropped.Load(), Failures: l.failures.Load()}
}

// Flush waits until the records added so far are in the store (tests, and
// Close).
func (l *Log) Flush() {
	l.qmu.RLock()
	q := l.queue
	ack := make(chan struct{})
	if q != nil {
		q <- queued{ack: ack}
	}
	l.qmu.RUnlock()
	if q != nil {
		<-ack
	}
}

// Close writes what is queued to the store and closes the file.
func (l *Log) Close() error {
	l.qmu.Lock()
	q := l.queue
	l.queue = nil
	l.qmu.Unlock()
	if q != nil {
		close(q)
		<-l.done
	}
	if l.opts.File != nil {
		return l.opts.File.Close()
	}
	return nil
}
