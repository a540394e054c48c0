;; describe recurses 2^64 times without a loop: no loop header for a
;; termination check to sit on. The load must still time out.
(module
  (memory (export "memory") 1)
  (func $f (param $n i64) (result i64)
    (if (result i64) (i64.eqz (local.get $n))
      (then (i64.const 1))
      (else (i64.add
        (call $f (i64.sub (local.get $n) (i64.const 1)))
        (call $f (i64.sub (local.get $n) (i64.const 1)))))))
  (func (export "describe") (result i32)
    (drop (call $f (i64.const 64)))
    (i32.const 0))
  (func (export "compact") (result i32) (i32.const 1)))
