// The kit's replacement for AssemblyScript's env.abort. Build with
//
//   asc ... --use abort=compactd/abort/abort
//
// and a failed assertion, an out-of-range index or a JSON syntax error
// writes its message and place to stderr, which the host quotes in its
// error, and traps; the caller gets its conversation back unchanged.
// Without the flag the module imports env.abort, which compactd does not
// provide: the plugin would fail to load.

import { utf8Encode } from "./index";

// @ts-ignore: decorator
@external("wasi_snapshot_preview1", "fd_write")
declare function wasiFdWrite(fd: u32, iovs: usize, iovsLen: u32, written: usize): u16;

/** abort replaces AssemblyScript's env.abort (see above): it writes the message and place to
 * stderr, which the host quotes in its error, and traps. */
export function abort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  let text = "abort: " + (message != null ? message! : "(no message)");
  if (fileName != null) text += " at " + fileName! + ":" + line.toString() + ":" + column.toString();
  text += "\n";
  const b = utf8Encode(text);
  const iov = memory.data(8);
  store<u32>(iov, <u32>changetype<usize>(b));
  store<u32>(iov + 4, <u32>b.byteLength);
  wasiFdWrite(2, iov, 1, memory.data(4));
  unreachable();
}
