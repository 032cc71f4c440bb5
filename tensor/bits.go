package tensor

import "math"

func math32bits(f float32) uint32     { return math.Float32bits(f) }
func math32frombits(b uint32) float32 { return math.Float32frombits(b) }
