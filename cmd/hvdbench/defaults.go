package main

import "github.com/gohorovod/gohorovod/runtime/config"

func defaultThreshold() int64 { return config.DefaultFusionThreshold }
