// The plugin's exports. A policy's entry file re-exports them:
//
//   export * from "../compactd/exports";
//
// and builds with `--use abort=compactd/abort/abort` (see abort.ts).

import {
  Code,
  CompactResult,
  PolicyError,
  Request,
  decodeFast,
  decodeJSON,
  registeredDescribe,
  runCompact,
  toKernel,
  utf8Encode,
} from "./index";
import "./abort"; // compiled in for --use abort=compactd/abort/abort

// @ts-ignore: decorator
@external("extism:host/env", "input_length")
declare function extismInputLength(): u64;
// @ts-ignore: decorator
@external("extism:host/env", "input_load_u64")
declare function extismInputLoadU64(off: u64): u64;
// @ts-ignore: decorator
@external("extism:host/env", "input_load_u8")
declare function extismInputLoadU8(off: u64): u32;
// @ts-ignore: decorator
@external("extism:host/env", "output_set")
declare function extismOutputSet(off: u64, n: u64): void;
// @ts-ignore: decorator
@external("extism:host/env", "error_set")
declare function extismErrorSet(off: u64): void;

/** run runs function fn (1 describe, 2 compact) on a decoded request and
 * returns (status, JSON): status 0 with the output, or 1 with an error body. */
function finish(res: CompactResult): string {
  const err = res.error;
  if (err != null) {
    lastStatus = 1;
    return err.toJSON();
  }
  lastStatus = 0;
  return res.toJSON();
}

let lastStatus: u8 = 0;

function compactRequest(req: Request, decodeErr: PolicyError | null): string {
  if (decodeErr != null) return finish(CompactResult.failed(decodeErr));
  return finish(runCompact(req));
}

// ---- Extism path ---------------------------------------------------------------

function setOutput(out: string): i32 {
  const b = utf8Encode(out);
  const off = toKernel(changetype<usize>(b), b.byteLength);
  if (off == 0) return 1;
  if (lastStatus == 0) extismOutputSet(off, <u64>b.byteLength);
  else extismErrorSet(off);
  return lastStatus;
}

export function describe(): i32 {
  lastStatus = 0;
  return setOutput(registeredDescribe());
}

export function compact(): i32 {
  const n = <i32>extismInputLength();
  const input = new Uint8Array(n);
  const p = input.dataStart;
  let i = 0;
  for (; i + 8 <= n; i += 8) store<u64>(p + <usize>i, extismInputLoadU64(<u64>i));
  for (; i < n; i++) store<u8>(p + <usize>i, <u8>extismInputLoadU8(<u64>i));
  const req = new Request();
  const err = decodeJSON(input, req);
  return setOutput(compactRequest(req, err));
}

// ---- Fast path -----------------------------------------------------------------

// Both buffers stay referenced here until the next call, so the garbage
// collector cannot move or free them while the host reads or writes.
let fastIn: ArrayBuffer = new ArrayBuffer(0);
let fastOut: ArrayBuffer = new ArrayBuffer(0);

export function compactd_fast_v1_alloc(size: u32): u32 {
  const need = max<i32>(<i32>size, 1);
  if (fastIn.byteLength < need || (fastIn.byteLength > 4 << 20 && need < fastIn.byteLength / 4)) {
    fastIn = new ArrayBuffer(need);
  }
  return <u32>changetype<usize>(fastIn);
}

export function compactd_fast_v1_call(fn: u32, ptr: u32, size: u32): u64 {
  let out: string;
  if (fn == 0) {
    lastStatus = 0;
    out = "";
  } else if (fn == 1) {
    lastStatus = 0;
    out = registeredDescribe();
  } else if (fn != 2) {
    out = finish(CompactResult.fail(Code.InvalidRequest, "unknown fast-path function"));
  } else if (ptr != <u32>changetype<usize>(fastIn) || <i32>size > fastIn.byteLength) {
    out = finish(CompactResult.fail(Code.InvalidRequest, "fast-path input is not the buffer compactd_fast_v1_alloc returned"));
  } else {
    const req = new Request();
    const err = decodeFast(fastIn, <i32>size, req);
    out = compactRequest(req, err);
  }
  const n = String.UTF8.byteLength(out);
  fastOut = new ArrayBuffer(n + 1);
  const p = changetype<usize>(fastOut);
  store<u8>(p, lastStatus);
  String.UTF8.encodeUnsafe(changetype<usize>(out), out.length, p + 1, false, String.UTF8.ErrorMode.REPLACE);
  return (<u64>p << 32) | <u64>(n + 1);
}
