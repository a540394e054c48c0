;; Imports a function compactd does not provide: refused at load.
(module
  (import "env" "oops" (func $oops))
  (memory (export "memory") 1)
  (func (export "describe") (result i32) (call $oops) (i32.const 1))
  (func (export "compact") (result i32) (i32.const 1)))
