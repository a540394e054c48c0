;; Describes itself, on both paths, and then never returns from compact:
;; a call that must stop at its work budget (or its wall-clock limit).
;; It is small, so a test can compile it for every tier in no time.
(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (memory (export "memory") 1)
  ;; The fast path's status byte (0: ok), then the description.
  (data (i32.const 1024) "\00{\"abi\":\"1.0\",\"name\":\"compact-loop\",\"version\":\"0.0.1\",\"description\":\"Never returns from compact.\"}")
  (global $len i32 (i32.const 98))
  (func $spin (loop $forever (br $forever)))
  ;; Extism: the description (without the status byte) into a kernel block.
  (func (export "describe") (result i32)
    (local $block i64) (local $i i32)
    (local.set $block (call $alloc (i64.extend_i32_u (i32.sub (global.get $len) (i32.const 1)))))
    (loop $copy
      (call $store_u8 (i64.add (local.get $block) (i64.extend_i32_u (local.get $i)))
        (i32.load8_u (i32.add (i32.const 1025) (local.get $i))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $copy (i32.lt_u (local.get $i) (i32.sub (global.get $len) (i32.const 1)))))
    (call $output_set (local.get $block) (i64.extend_i32_u (i32.sub (global.get $len) (i32.const 1))))
    (i32.const 0))
  (func (export "compact") (result i32) (call $spin) (i32.const 1))
  (func (export "compactd_fast_v1_alloc") (param i32) (result i32) (i32.const 4096))
  ;; Function 1 is describe; every other call spins.
  (func (export "compactd_fast_v1_call") (param $fn i32) (param i32 i32) (result i64)
    (if (i32.ne (local.get $fn) (i32.const 1)) (then (call $spin)))
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.extend_i32_u (global.get $len)))))
