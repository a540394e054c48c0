;; Output that is not UTF-8: a description written in Latin-1 ("caf\xe9").
;; Go's JSON decoder would quietly turn the byte into U+FFFD; the host must
;; refuse it (and any result that is not UTF-8, see host/result_test.go).
(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (memory (export "memory") 1)
  (data (i32.const 16) "{\"abi\":\"1.0\",\"name\":\"zoo-badutf8\",\"version\":\"0.0.1\",\"description\":\"caf\e9\"}\00")
  ;; out makes the NUL-terminated string at $p the call's output (a
  ;; kernel block filled byte by byte).
  (func $out (param $p i32) (local $n i32) (local $i i32) (local $k i64)
    (block $end (loop $count
      (br_if $end (i32.eqz (i32.load8_u (i32.add (local.get $p) (local.get $n)))))
      (local.set $n (i32.add (local.get $n) (i32.const 1)))
      (br $count)))
    (local.set $k (call $alloc (i64.extend_i32_u (local.get $n))))
    (block $done (loop $copy
      (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
      (call $store_u8 (i64.add (local.get $k) (i64.extend_i32_u (local.get $i)))
                      (i32.load8_u (i32.add (local.get $p) (local.get $i))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $copy)))
    (call $output_set (local.get $k) (i64.extend_i32_u (local.get $n))))
  (func (export "describe") (result i32) (call $out (i32.const 16)) (i32.const 0))
  (func (export "compact") (result i32) (i32.const 1)))
