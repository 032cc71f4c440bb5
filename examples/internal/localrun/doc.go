// Package localrun runs an example's training or benchmark function, or
// any function over the collectives, on several ranks of one process
// (hvd.RunLocal over the in-memory group), for the examples' tests and
// the adapters'.
package localrun
