;; compact asks count_tokens to count a 200 MiB block, which the host must
;; refuse at once (-1) without reading it, and then counts a 16 MiB block
;; (the most it may pass) again and again: the host must stop it at the
;; call's time limit, inside count_tokens too.
(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/env" "free" (func $free (param i64)))
  (import "extism:host/user" "count_tokens" (func $count_tokens (param i64) (result i64)))
  (memory (export "memory") 1)
  (data (i32.const 16) "{\"abi\":\"1.0\",\"name\":\"zoo-counthuge\",\"version\":\"0.0.1\"}\00")
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
  (func (export "compact") (result i32) (local $k i64)
    (local.set $k (call $alloc (i64.const 209715200)))
    (if (i64.ne (call $count_tokens (local.get $k)) (i64.const -1)) (then (unreachable)))
    (call $free (local.get $k))
    (local.set $k (call $alloc (i64.const 16777216)))
    (loop $forever
      (drop (call $count_tokens (local.get $k)))
      (br $forever))
    (i32.const 1)))
