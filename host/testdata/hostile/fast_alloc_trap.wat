;; A fast-path module (it exports compactd_fast_v1_alloc and
;; compactd_fast_v1_call and imports nothing) whose alloc traps: the first
;; call into it, describe at load, fails with a trap.
(module
  (memory (export "memory") 1)
  (func (export "compactd_fast_v1_alloc") (param i32) (result i32) (unreachable))
  (func (export "compactd_fast_v1_call") (param i32 i32 i32) (result i64) (unreachable))
  (func (export "describe") (result i32) (i32.const 1))
  (func (export "compact") (result i32) (i32.const 1)))
