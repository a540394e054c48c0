;; A fast-path module whose _initialize never returns. A WASI reactor's
;; _initialize runs the guest's runtime and package initializers (a Go
;; plugin's take some 40,000 steps); the host runs it right after
;; instantiation on the fast path, and through the Extism SDK's first call
;; on the Extism path. Either way it must stop at the start work budget
;; (or the instantiation's wall-clock limit).
(module
  (memory (export "memory") 1)
  (func (export "_initialize") (loop $forever (br $forever)))
  (func (export "compactd_fast_v1_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "compactd_fast_v1_call") (param i32 i32 i32) (result i64) (i64.const 0))
  (func (export "describe") (result i32) (i32.const 1))
  (func (export "compact") (result i32) (i32.const 1)))
