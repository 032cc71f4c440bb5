package timeline

// Activity names drawn inside an operation's span (Horovod's). The host
// path and the GPU executor share them.
const (
	MemcpyInFusion  = "MEMCPY_IN_FUSION_BUFFER"
	MemcpyOutFusion = "MEMCPY_OUT_FUSION_BUFFER"
	MPIAllreduce    = "MPI_ALLREDUCE"
	MPIAllgather    = "MPI_ALLGATHER"
	MPIBcast        = "MPI_BCAST"
	MPIAlltoall     = "MPI_ALLTOALL"
	MPIReduceScat   = "MPI_REDUCESCATTER"
	MPIBarrier      = "MPI_BARRIER"
	MPIAdasum       = "MPI_ADASUM"

	NCCLAllreduce  = "NCCL_ALLREDUCE"
	NCCLAllgather  = "NCCL_ALLGATHER"
	NCCLBcast      = "NCCL_BCAST"
	NCCLAlltoall   = "NCCL_ALLTOALL"
	NCCLReduceScat = "NCCL_REDUCESCATTER"
	MemcpyInHost   = "MEMCPY_IN_HOST_BUFFER"
	MemcpyOutHost  = "MEMCPY_OUT_HOST_BUFFER"
	ScaleOnHost    = "SCALE_ON_HOST"
	InitNCCL       = "INIT_NCCL" // the NCCL communicator made at the first GPU operation
)
