// The transcript both SDK scripts print: one JSON line per request, read
// by internal/proxy/sdktest.
let request = 0;

// record prints a request's line; response is the SDK's raw Response
// (null where an SDK helper does not expose it).
export function record(kind, sent, response, extra) {
  request++;
  console.log(JSON.stringify({
    request, kind, sent,
    compacted: response ? response.headers.get('x-compactd-compacted') === 'true' : null,
    warning: response ? response.headers.get('x-compactd-warning') : null,
    ...extra,
  }));
}

// fail ends the script with the SDK's (or the check's) complaint.
export function fail(msg) {
  console.error(msg);
  process.exit(1);
}
