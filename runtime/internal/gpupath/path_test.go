package gpupath

import (
	"testing"

	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

func TestChoose(t *testing.T) {
	none := Caps{}
	nccl := Caps{NCCL: true, NCCLBFloat16: true}
	oldNCCL := Caps{NCCL: true}
	mpi := Caps{CUDAAwareMPI: true}
	both := Caps{NCCL: true, NCCLBFloat16: true, CUDAAwareMPI: true}
	oldBoth := Caps{NCCL: true, CUDAAwareMPI: true}
	f32 := tensor.Float32
	tests := []struct {
		name string
		caps Caps
		typ  wire.RequestType
		dt   tensor.DType
		want Path
	}{
		{"nothing: allreduce staged", none, wire.Allreduce, f32, Staged},
		{"nothing: allgather staged", none, wire.Allgather, f32, Staged},
		{"nccl allreduce", nccl, wire.Allreduce, f32, NCCL},
		{"nccl allgather", nccl, wire.Allgather, tensor.Int64, NCCL},
		{"nccl broadcast", nccl, wire.Broadcast, tensor.Uint8, NCCL},
		{"nccl alltoall", nccl, wire.Alltoall, f32, NCCL},
		{"nccl reducescatter", nccl, wire.Reducescatter, tensor.Float16, NCCL},
		{"nccl preferred over cuda-aware mpi", both, wire.Allreduce, f32, NCCL},
		{"adasum is staged even with nccl", both, wire.Adasum, f32, Staged},
		{"barrier is host", both, wire.Barrier, tensor.Invalid, Staged},
		{"join is host", both, wire.Join, tensor.Invalid, Staged},
		{"old nccl: bfloat16 allreduce staged", oldNCCL, wire.Allreduce, tensor.BFloat16, Staged},
		{"old nccl: bfloat16 broadcast staged", oldNCCL, wire.Broadcast, tensor.BFloat16, Staged},
		{"old nccl: bfloat16 broadcast by cuda-aware mpi", oldBoth, wire.Broadcast, tensor.BFloat16, CUDAAwareMPI},
		{"old nccl: bfloat16 allreduce cannot use mpi's host op", oldBoth, wire.Allreduce, tensor.BFloat16, Staged},
		{"cuda-aware mpi allreduce", mpi, wire.Allreduce, tensor.Float64, CUDAAwareMPI},
		{"cuda-aware mpi allgather of halves", mpi, wire.Allgather, tensor.Float16, CUDAAwareMPI},
		{"cuda-aware mpi float16 allreduce staged", mpi, wire.Allreduce, tensor.Float16, Staged},
		{"cuda-aware mpi float16 reducescatter staged", mpi, wire.Reducescatter, tensor.Float16, Staged},
		{"cuda-aware mpi alltoall", mpi, wire.Alltoall, tensor.Int32, CUDAAwareMPI},
		{"nccl has no int16: staged", nccl, wire.Allreduce, tensor.Int16, Staged},
		{"nccl has no uint16: staged", nccl, wire.Broadcast, tensor.Uint16, Staged},
		{"nccl has no int16: cuda-aware mpi", both, wire.Allgather, tensor.Int16, CUDAAwareMPI},
		{"uint16 reducescatter by cuda-aware mpi", both, wire.Reducescatter, tensor.Uint16, CUDAAwareMPI},
		{"nccl bool allreduce", nccl, wire.Allreduce, tensor.Bool, NCCL},
		{"nccl bool alltoall", nccl, wire.Alltoall, tensor.Bool, NCCL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Choose(tt.caps, Op{Type: tt.typ, DType: tt.dt}); got != tt.want {
				t.Errorf("Choose(%+v, %v %v) = %v, want %v", tt.caps, tt.typ, tt.dt, got, tt.want)
			}
		})
	}
}

func TestPathString(t *testing.T) {
	for p, want := range map[Path]string{Staged: "host staging", NCCL: "NCCL", CUDAAwareMPI: "CUDA-aware MPI", 9: "unknown path"} {
		if p.String() != want {
			t.Errorf("%d: %q, want %q", p, p.String(), want)
		}
	}
}
