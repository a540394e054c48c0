package main

import "github.com/compactd/compactd/idents"

// item is one fact a folded message holds (package idents finds most of
// them; the ledger adds what the agent ran and what the user said).
type item = idents.Item

// Kinds of ledger items, in the order a chunk lists them (idents.Kind).
const (
	kindRan    = idents.KindRan    // tools called and the programs their commands ran
	kindFile   = idents.KindFile   // file paths
	kindDef    = idents.KindDef    // names defined
	kindName   = idents.KindName   // other identifiers: called, snake_case, camelCase
	kindError  = idents.KindError  // error lines observed
	kindID     = idents.KindID     // ids: words mixing letters and digits
	kindNumber = idents.KindNumber // numbers and dates observed
	kindSaid   = idents.KindSaid   // what the user said after the task
	numKinds   = idents.NumKinds
)

// kindNames label each kind's line in a chunk.
var kindNames = [numKinds]string{"ran", "files", "defined", "names", "errors", "ids", "numbers", "user said"}
