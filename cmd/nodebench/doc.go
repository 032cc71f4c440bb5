// Command nodebench measures allreduce across the nodes of an emulated
// cluster (package internal/emucluster: nodes as network namespaces, each
// link shaped by tc), on every path a job can take between nodes, side by
// side in interleaved rounds:
//
//	embedded      our runtime on the embedded transport, one gohorovodrun
//	              --nnodes launcher per node (as srun, torchrun or a
//	              PyTorchJob start it)
//	mpirun        our runtime under mpirun, started by gohorovodrun -H over
//	              the cluster's ssh stand-in (the launcher's and the
//	              workers' Open MPI settings included), host collectives
//	              on whichever of MPI and the TCP ring Init measured faster
//	mpirun-mpi    the same with HOROVOD_CPU_OPERATIONS=mpi: tensors on MPI
//	mpirun-tcp    the same with HOROVOD_CPU_OPERATIONS=gloo: tensors on the
//	              embedded transport's TCP ring, MPI for the rest
//	raw-mpi       the C yardstick (cmd/nodebench/yardstick/allreduce.c):
//	              MPI_Allreduce of the case's bytes in one buffer, Open MPI's
//	              defaults
//	raw-mpi-ring  the same with Open MPI's ring allreduce forced
//	gloo          torch.distributed's gloo (scripts/torch_gloo_bench.py),
//	              where python3 can import torch
//	embedded-hier our runtime on the embedded transport with hierarchical
//	              allreduce (meaningful with -ranks-per-node 2 or more)
//
// Cases: 64MiB (one tensor), resnet50 (ResNet-50's 161 gradient tensors,
// 97.5 MiB), 4KiBx1000 (1000 tensors of 4 KiB) and 4MB (one tensor of the
// same 4,096,000 bytes). Each rank runs cmd/hvdbench's worker for our
// runtime.
//
// Figures follow nccl-tests: time (the median over iterations of the
// slowest rank per iteration, then the median over rounds), algbw =
// bytes/time, busbw = algbw·2(n-1)/n, and busbw as a share of the link
// (link_share); with one rank per node, link_share is the share of the
// ring's bound, the least time any allreduce can take over the links.
//
// It needs root and iproute2 (for the namespaces), and bin/ built with
// the mpi tag (make build) plus the yardstick, which it compiles with
// mpicc. Example:
//
//	nodebench -nodes 2,3 -rate 1gbit -rounds 3
//	nodebench -nodes 2 -rate 10gbit -paths embedded,gloo
//	nodebench -nodes 2 -ranks-per-node 2 -paths embedded,embedded-hier -cases 64MiB
package main
