;; F3: a start section that never returns. It runs while the module is
;; instantiated, before any export is called; the host must stop it at the
;; call timeout. It once hung the loader (and the daemon's start) forever.
(module
  (memory (export "memory") 1)
  (func $spin (loop $forever (br $forever)))
  (start $spin)
  (func (export "describe") (result i32) (i32.const 1))
  (func (export "compact") (result i32) (i32.const 1)))
