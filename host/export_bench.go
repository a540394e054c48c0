package host

// EncodeRequestForTest returns the JSON the host sends to a plugin's
// compact export for req. Benchmarks use it to feed the same bytes to a
// policy called natively.
func EncodeRequestForTest(req *Request) []byte { return encodeRequest(req) }
