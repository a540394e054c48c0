;; A healthy module, on both paths, whose describe logs one warning line,
;; "describing", before it answers. The host's tests hold that line in
;; their log writer to make a load run past its wall-clock limit, to see
;; it retried, and served, compiled.
(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/env" "log_warn" (func $log_warn (param i64)))
  (memory (export "memory") 1)
  ;; The fast path's status byte (0: ok), then the description.
  (data (i32.const 1024) "\00{\"abi\":\"1.0\",\"name\":\"describe-logs\",\"version\":\"0.0.1\",\"description\":\"Logs a line before it describes itself.\"}")
  (global $len i32 (i32.const 111))
  (data (i32.const 16) "describing")
  ;; block copies n bytes at p into a new kernel block.
  (func $block (param $p i32) (param $n i32) (result i64)
    (local $k i64) (local $i i32)
    (local.set $k (call $alloc (i64.extend_i32_u (local.get $n))))
    (block $done (loop $copy
      (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
      (call $store_u8 (i64.add (local.get $k) (i64.extend_i32_u (local.get $i)))
        (i32.load8_u (i32.add (local.get $p) (local.get $i))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $copy)))
    (local.get $k))
  (func $warn (call $log_warn (call $block (i32.const 16) (i32.const 10))))
  ;; Extism: the description (without the status byte) into a kernel block.
  (func (export "describe") (result i32)
    (call $warn)
    (call $output_set (call $block (i32.const 1025) (i32.sub (global.get $len) (i32.const 1)))
      (i64.extend_i32_u (i32.sub (global.get $len) (i32.const 1))))
    (i32.const 0))
  (func (export "compact") (result i32) (i32.const 1))
  (func (export "compactd_fast_v1_alloc") (param i32) (result i32) (i32.const 4096))
  ;; Every fast-path call answers the description: only describe is used.
  (func (export "compactd_fast_v1_call") (param i32 i32 i32) (result i64)
    (call $warn)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.extend_i32_u (global.get $len)))))
