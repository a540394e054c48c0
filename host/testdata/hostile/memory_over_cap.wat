;; F1: a module whose memory declares 4097 initial pages (256 MiB + 64 KiB),
;; one page over the default limit of 4096. The host must refuse it at load
;; with a memory-limit error; it once crashed the daemon while instantiating.
(module
  (memory (export "memory") 4097)
  (func (export "describe") (result i32) (i32.const 1))
  (func (export "compact") (result i32) (i32.const 1)))
