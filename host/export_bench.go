package host

import "github.com/compactd/compactd/abi"

// EncodeRequestForTest returns the JSON the host sends to a plugin's
// compact export for req. Benchmarks use it to feed the same bytes to a
// policy called natively.
func EncodeRequestForTest(req *Request) []byte { return encodeRequest(req) }

// EncodeFastRequestForTest returns the bytes the host sends on the fast
// path (the binary request) for req.
func EncodeFastRequestForTest(req *Request) []byte { return encodeFor("fast", abi.ViewFull, req) }
