package proxy

import (
	"bufio"
	"io"
	"sync"
)

// relayBufferSize is the size of the buffers an answer is relayed
// through: the reverse proxy's copy buffer and a stream's read buffer.
const relayBufferSize = 32 << 10

// relayBuffers pools the buffers an answer is relayed through, so that
// relaying one allocates neither (at 32 KiB each, they were most of what
// a streamed answer allocated before its first byte reached the client).
// Its zero value is ready; it is safe for concurrent use.
type relayBuffers struct {
	copies  sync.Pool // of *[]byte
	readers sync.Pool // of *bufio.Reader
}

// Get returns a copy buffer (httputil.BufferPool).
func (b *relayBuffers) Get() []byte {
	if v, ok := b.copies.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, relayBufferSize)
}

// Put gives a copy buffer back (httputil.BufferPool).
func (b *relayBuffers) Put(buf []byte) {
	if cap(buf) < relayBufferSize {
		return
	}
	buf = buf[:relayBufferSize]
	b.copies.Put(&buf)
}

// reader returns a read buffer reading r.
func (b *relayBuffers) reader(r io.Reader) *bufio.Reader {
	if br, ok := b.readers.Get().(*bufio.Reader); ok {
		br.Reset(r)
		return br
	}
	return bufio.NewReaderSize(r, relayBufferSize)
}

// putReader gives a read buffer back; nothing may use it afterwards.
func (b *relayBuffers) putReader(br *bufio.Reader) {
	br.Reset(nil) // drops the body it read
	b.readers.Put(br)
}
