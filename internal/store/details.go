package store

import (
	"context"
	"fmt"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// DefaultMaxDetailBytes caps the last-compaction records over all
// conversations; DefaultMaxDetailValue caps one.
const (
	DefaultMaxDetailBytes = 64 << 20
	DefaultMaxDetailValue = 1 << 20
)

// detailsBucketName holds each conversation's last-compaction record.
const detailsBucketName = "_compactions"

// SetLastCompaction records what the conversation's last compaction did:
// an opaque JSON record (the daemon's API defines it), shown by the status
// page. Like the status counters it is kept in memory and written behind
// (Flush), so it costs a request no disk write; it lives and expires with
// the conversation's status. The records are bounded in bytes over all
// conversations (MaxDetailBytes; the oldest go first). A record for a
// conversation Observe has not seen, or one over DefaultMaxDetailValue
// bytes, is refused.
func (s *Store) SetLastCompaction(conversationID string, record []byte) error {
	if len(record) > DefaultMaxDetailValue {
		return fmt.Errorf("%w: compaction record of %d bytes (the limit is %d)", ErrTooLarge, len(record), DefaultMaxDetailValue)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if _, ok := s.convs[conversationID]; !ok {
		return fmt.Errorf("store: no conversation %q", conversationID)
	}
	s.pendingDetails[conversationID] = append([]byte(nil), record...)
	delete(s.pendingBuilders, conversationID)
	return nil
}

// SetLastCompactionFunc is SetLastCompaction with a record built only
// when it is needed: when the store writes it (Flush, once a second) or
// someone reads it. A conversation compacted many times a second is then
// described once a second, not on every request. build runs at most once,
// without the store's lock; it must not change anything it reads.
func (s *Store) SetLastCompactionFunc(conversationID string, build func() ([]byte, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if _, ok := s.convs[conversationID]; !ok {
		return fmt.Errorf("store: no conversation %q", conversationID)
	}
	delete(s.pendingDetails, conversationID)
	s.pendingBuilders[conversationID] = &lazyDetail{build: build}
	return nil
}

// lazyDetail is a record SetLastCompactionFunc left unbuilt.
type lazyDetail struct {
	once  sync.Once
	build func() ([]byte, error)
	b     []byte
	err   error
}

func (d *lazyDetail) bytes() ([]byte, error) {
	d.once.Do(func() {
		d.b, d.err = d.build()
		d.build = nil
		if d.err == nil && len(d.b) > DefaultMaxDetailValue {
			d.err = fmt.Errorf("%w: compaction record of %d bytes (the limit is %d)", ErrTooLarge, len(d.b), DefaultMaxDetailValue)
		}
	})
	return d.b, d.err
}

// buildPending builds the records SetLastCompactionFunc left unbuilt and
// makes them pending ones. A record that fails to build is dropped.
func (s *Store) buildPending() {
	s.mu.Lock()
	builders := s.pendingBuilders
	s.pendingBuilders = map[string]*lazyDetail{}
	s.buildingDetails = builders // LastCompaction reads them meanwhile
	s.mu.Unlock()
	for id, d := range builders {
		b, err := d.bytes()
		s.mu.Lock()
		_, newer := s.pendingBuilders[id]
		if err == nil && !newer && s.convs[id] != nil {
			s.pendingDetails[id] = b
		}
		delete(s.buildingDetails, id)
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.buildingDetails = nil
	s.mu.Unlock()
}

// LastCompaction returns the conversation's last-compaction record, or nil
// when it has none.
func (s *Store) LastCompaction(ctx context.Context, conversationID string) ([]byte, error) {
	s.mu.Lock()
	d, ok := s.pendingBuilders[conversationID]
	if !ok {
		d, ok = s.buildingDetails[conversationID] // a Flush is building it
	}
	if ok {
		s.mu.Unlock()
		if b, err := d.bytes(); err == nil {
			return append([]byte(nil), b...), nil
		}
		s.mu.Lock()
	}
	if _, alive := s.convs[conversationID]; !alive {
		s.mu.Unlock()
		return nil, nil
	}
	v, ok := s.pendingDetails[conversationID]
	if !ok {
		v, ok = s.flushingDetails[conversationID]
	}
	s.mu.Unlock()
	if ok {
		return append([]byte(nil), v...), nil
	}
	return s.details.Get(ctx, []byte(conversationID))
}

// flushDetailsTx writes the pending records (of conversations still
// tracked) and deletes those of the conversations in gone.
func (s *Store) flushDetailsTx(tx *bolt.Tx, pending map[string][]byte, gone []string) error {
	opts := s.details.options()
	for id, v := range pending {
		if err := s.details.putTx(tx, []byte(id), v, opts); err != nil {
			return err
		}
	}
	for _, id := range gone {
		if err := s.details.deleteTx(tx, []byte(id)); err != nil {
			return err
		}
	}
	return nil
}
