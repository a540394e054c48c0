;; describe never returns: the load must time out.
(module
  (memory (export "memory") 1)
  (func (export "describe") (result i32)
    (loop $forever (br $forever))
    (i32.const 0))
  (func (export "compact") (result i32) (i32.const 1)))
