;; Has describe but no compact export: refused at load.
(module
  (memory (export "memory") 1)
  (func (export "describe") (result i32) (i32.const 1)))
