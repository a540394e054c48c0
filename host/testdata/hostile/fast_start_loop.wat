;; F3 on the fast path: a module with the fast-path exports whose start
;; section never returns. Instantiation must stop at the call timeout.
(module
  (memory (export "memory") 1)
  (func $spin (loop $forever (br $forever)))
  (start $spin)
  (func (export "compactd_fast_v1_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "compactd_fast_v1_call") (param i32 i32 i32) (result i64) (i64.const 0))
  (func (export "describe") (result i32) (i32.const 1))
  (func (export "compact") (result i32) (i32.const 1)))
