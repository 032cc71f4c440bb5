/*
 * The raw-MPI yardstick of nodebench: MPI_Allreduce (sum, float32) of each
 * case's bytes packed in one buffer, timed over iterations, the slowest
 * rank's time per iteration, with the median printed as nodebench reads it:
 *
 *   impl=raw-mpi case=NAME bytes=B ranks=N iters=I median_ms=M min_ms=A max_ms=Z
 *
 * Usage: allreduce ITERS WARMUP NAME=BYTES [NAME=BYTES ...]
 * The result is checked (every element the sum over ranks of rank+1).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (argc < 4) {
		if (rank == 0)
			fprintf(stderr, "usage: %s ITERS WARMUP NAME=BYTES...\n", argv[0]);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	int iters = atoi(argv[1]), warmup = atoi(argv[2]);
	double *times = calloc(iters, sizeof(double));
	for (int c = 3; c < argc; c++) {
		char *eq = strchr(argv[c], '=');
		if (!eq) {
			if (rank == 0)
				fprintf(stderr, "case %s: want NAME=BYTES\n", argv[c]);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
		*eq = 0;
		long n = atol(eq + 1) / 4;
		float *buf = malloc(n * sizeof(float));
		float want = (float)size * (size + 1) / 2;
		for (int it = 0; it < warmup + iters; it++) {
			for (long i = 0; i < n; i++)
				buf[i] = (float)(rank + 1);
			MPI_Barrier(MPI_COMM_WORLD);
			double t0 = MPI_Wtime();
			MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
			double dt = MPI_Wtime() - t0, slowest;
			MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
			if (buf[0] != want || buf[n - 1] != want || buf[n / 2] != want) {
				fprintf(stderr, "rank %d case %s: sum %g, want %g\n", rank, argv[c], buf[0], want);
				MPI_Abort(MPI_COMM_WORLD, 1);
			}
			if (it >= warmup)
				times[it - warmup] = slowest;
		}
		qsort(times, iters, sizeof(double), cmp);
		if (rank == 0)
			printf("impl=raw-mpi case=%s bytes=%ld ranks=%d iters=%d median_ms=%.4f min_ms=%.4f max_ms=%.4f\n",
			       argv[c], n * 4, size, iters, times[iters / 2] * 1e3, times[0] * 1e3, times[iters - 1] * 1e3);
		fflush(stdout);
		free(buf);
	}
	free(times);
	MPI_Finalize();
	return 0;
}
