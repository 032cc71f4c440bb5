//go:build !mpi || !cgo

package runtime

import (
	"fmt"
	"testing"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// TestGPUStagedTransportFault is TestTransportFaultEveryCollective on the
// GPU path staged through host memory: device tensors, the host transport
// fails on rank 1 under each kind of collective. Every handle completes with
// the error (naming rank 1 on the others), and later calls return it.
func TestGPUStagedTransportFault(t *testing.T) { testGPUTransportFault(t, false) }

// TestGPUNCCLTransportFault is the same with NCCL (a fake over an
// in-memory group) failing on rank 1.
func TestGPUNCCLTransportFault(t *testing.T) { testGPUTransportFault(t, true) }

func testGPUTransportFault(t *testing.T, useNCCL bool) {
	const n = 3
	for _, fc := range faultCases() {
		if fc.name == "barrier" || fc.name == "allreduce-chunked" {
			continue // no device tensor; chunking is the CPU path's
		}
		t.Run(fc.name, func(t *testing.T) {
			injected := fmt.Errorf("injected transport failure in %s (nccl %v)", fc.name, useNCCL)
			traps := make([]*trap, n)
			wrap := func(i int, m comm.Communicator) comm.Communicator {
				traps[i] = &trap{Communicator: m, magic: -2}
				if i == 1 {
					traps[i].magic, traps[i].err = fc.magic, injected
				}
				return traps[i]
			}
			setup := gpuSetup{wrap: wrap}
			if useNCCL {
				setup = gpuSetup{nccl: true, wrapNCCL: wrap}
			}
			c := startGPUCluster(t, n, setup)
			hs := make([]*Handle, n)
			type alloc struct {
				rank int
				t    *tensor.Tensor
			}
			var allocs []alloc
			t.Cleanup(func() { // before the cluster's cleanup closes the devices
				for _, a := range allocs {
					cuda.FreeTensor(c.devs[a.rank], a.t)
				}
			})
			for rank, r := range c.rts {
				h, err := fc.run(r, func(x *tensor.Tensor) *tensor.Tensor {
					d, err := toDev(c.devs[rank], x)
					if err != nil {
						t.Fatal(err)
					}
					allocs = append(allocs, alloc{rank, d})
					return d
				})
				if err != nil {
					t.Fatalf("rank %d: %v", rank, err)
				}
				hs[rank] = h
			}
			checkFaultErrors(t, &c.cluster, hs, injected)
			if !traps[1].fired.Load() {
				t.Fatal("the fault was never injected")
			}
		})
	}
}
