;; describe answers 8 MiB (of zero bytes): far over the 1 MiB a description
;; may take, and under the 32 MiB output limit, so the description's own
;; limit is what refuses it.
(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (memory (export "memory") 1)
  (func (export "describe") (result i32)
    (call $output_set (call $alloc (i64.const 8388608)) (i64.const 8388608))
    (i32.const 0))
  (func (export "compact") (result i32) (i32.const 1)))
