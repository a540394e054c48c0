;; On the fast path: a start section that recurses 2^64 times without a
;; loop (no loop header for a termination check). Instantiation must stop
;; at the call timeout, compiled (instrumented) or interpreted.
(module
  (memory (export "memory") 1)
  (func $f (param $n i64) (result i64)
    (if (result i64) (i64.eqz (local.get $n))
      (then (i64.const 1))
      (else (i64.add
        (call $f (i64.sub (local.get $n) (i64.const 1)))
        (call $f (i64.sub (local.get $n) (i64.const 1)))))))
  (func $start (drop (call $f (i64.const 64))))
  (start $start)
  (func (export "compactd_fast_v1_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "compactd_fast_v1_call") (param i32 i32 i32) (result i64) (i64.const 0))
  (func (export "describe") (result i32) (i32.const 1))
  (func (export "compact") (result i32) (i32.const 1)))
