// Package layers holds no code: its test enforces the layer order that
// docs/ARCHITECTURE.md draws. Every package of the module has a layer, and
// a package may import (outside its tests) only packages of lower layers.
// A new package fails the test until it is given its place in the table,
// so that the picture and the code change together.
package layers
