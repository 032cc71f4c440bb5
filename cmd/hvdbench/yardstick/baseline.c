/*
 * hvdbench's raw-MPI yardstick: the allreduce work of one benchmark case done
 * with plain MPI_Allreduce (float32, sum, in place) and nothing else, so that
 * hvdbench can time it beside the runtime in the same run and print ratios.
 *
 *   baseline [--shapes FILE | --bytes N] [--modes whole,per-tensor,fused]
 *            [--fusion-bytes N] [--iters K] [--warmup W]
 *
 * A case is a list of tensors: the lines of a shapes file ("name<TAB>AxBxC",
 * or a bare element count; '#' starts a comment), or one tensor of N bytes.
 * Modes:
 *   whole       every tensor packed in one buffer, one call
 *   per-tensor  one call per tensor, in the file's order
 *   fused       tensors copied into a buffer of --fusion-bytes (default
 *               128 MiB) in order, one call each time it is full and once
 *               for the rest, the copies in and out included
 * Rank 0 prints one line per mode:
 *   mode=M tensors=T bytes=B ranks=N iters=K median_ms=.. min_ms=.. max_ms=..
 *   algbw_GBps=.. busbw_GBps=..
 * Each iteration's time is the slowest rank's; median, min and max are over
 * iterations; algbw = bytes/time and busbw = algbw*2(n-1)/n.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *why) {
	fprintf(stderr, "baseline: %s\n", why);
	MPI_Abort(MPI_COMM_WORLD, 2);
}

static int by_value(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* load_shapes fills *elems with each tensor's element count. */
static size_t load_shapes(const char *path, size_t **elems) {
	FILE *f = fopen(path, "r");
	if (!f) fail("cannot open the shapes file");
	size_t n = 0, cap = 64;
	*elems = malloc(cap * sizeof **elems);
	char line[4096];
	while (fgets(line, sizeof line, f)) {
		if (line[0] == '#') continue;
		char *dims = strchr(line, '\t');
		dims = dims ? dims + 1 : line;
		size_t count = 0;
		for (char *d = strtok(dims, "x \r\n"); d; d = strtok(NULL, "x \r\n"))
			count = (count ? count : 1) * strtoull(d, NULL, 10);
		if (count == 0) continue;
		if (n == cap) *elems = realloc(*elems, (cap *= 2) * sizeof **elems);
		(*elems)[n++] = count;
	}
	fclose(f);
	return n;
}

struct job {
	size_t n, total, fusion; /* tensors, their elements, fusion buffer elements */
	size_t *elems;
	float *data, *fbuf; /* every tensor back to back; the fusion buffer */
};

static void flush(struct job *j, size_t from, size_t to, size_t used, size_t *off) {
	/* Copy tensors [from, to) in, reduce, copy them out. */
	size_t at = 0, o = off[from];
	for (size_t t = from; t < to; t++) memcpy(j->fbuf + at, j->data + off[t], j->elems[t] * 4), at += j->elems[t];
	MPI_Allreduce(MPI_IN_PLACE, j->fbuf, (int)used, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	memcpy(j->data + o, j->fbuf, used * 4);
}

static void run_once(struct job *j, const char *mode, size_t *off) {
	if (!strcmp(mode, "whole")) {
		MPI_Allreduce(MPI_IN_PLACE, j->data, (int)j->total, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	} else if (!strcmp(mode, "per-tensor")) {
		for (size_t t = 0; t < j->n; t++)
			MPI_Allreduce(MPI_IN_PLACE, j->data + off[t], (int)j->elems[t], MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	} else { /* fused: a tensor larger than the buffer goes alone, in place */
		size_t first = 0, used = 0;
		for (size_t t = 0; t <= j->n; t++) {
			int full = t == j->n || used + j->elems[t] > j->fusion;
			if (full && used > 0) flush(j, first, t, used, off);
			if (t == j->n) break;
			if (full) first = t, used = 0;
			if (j->elems[t] > j->fusion) {
				MPI_Allreduce(MPI_IN_PLACE, j->data + off[t], (int)j->elems[t], MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
				first = t + 1;
				continue;
			}
			used += j->elems[t];
		}
	}
}

static void measure(struct job *j, const char *mode, int iters, int warmup, int rank, int size) {
	size_t *off = malloc((j->n + 1) * sizeof *off);
	off[0] = 0;
	for (size_t t = 0; t < j->n; t++) off[t + 1] = off[t] + j->elems[t];
	double *ts = malloc(iters * sizeof *ts);
	for (int i = -warmup; i < iters; i++) {
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		run_once(j, mode, off);
		double dt = MPI_Wtime() - t0, slowest;
		MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
		if (i >= 0) ts[i] = slowest;
	}
	qsort(ts, iters, sizeof *ts, by_value);
	double med = ts[iters / 2], bytes = (double)j->total * 4, alg = bytes / med / 1e9;
	if (rank == 0)
		printf("mode=%s tensors=%zu bytes=%.0f ranks=%d iters=%d median_ms=%.4f min_ms=%.4f max_ms=%.4f "
		       "algbw_GBps=%.4f busbw_GBps=%.4f\n",
		       mode, j->n, bytes, size, iters, med * 1e3, ts[0] * 1e3, ts[iters - 1] * 1e3, alg,
		       alg * 2.0 * (size - 1) / size);
	fflush(stdout);
	free(ts);
	free(off);
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	const char *shapes = NULL, *modes = "whole,per-tensor,fused";
	size_t bytes = 0, fusion_bytes = (size_t)128 << 20;
	int iters = 20, warmup = 3;
	for (int i = 1; i < argc; i += 2) {
		const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v) fail("every option takes a value");
		if (!strcmp(k, "--shapes")) shapes = v;
		else if (!strcmp(k, "--bytes")) bytes = strtoull(v, NULL, 10);
		else if (!strcmp(k, "--modes")) modes = v;
		else if (!strcmp(k, "--fusion-bytes")) fusion_bytes = strtoull(v, NULL, 10);
		else if (!strcmp(k, "--iters")) iters = atoi(v);
		else if (!strcmp(k, "--warmup")) warmup = atoi(v);
		else fail("usage: baseline [--shapes FILE | --bytes N] [--modes whole,per-tensor,fused] "
			  "[--fusion-bytes N] [--iters K] [--warmup W]");
	}
	if (iters < 1 || warmup < 0) fail("--iters must be at least 1 and --warmup at least 0");
	if (fusion_bytes < 4) fail("--fusion-bytes must hold one float");
	struct job j = {.fusion = fusion_bytes / 4};
	if (shapes) {
		j.n = load_shapes(shapes, &j.elems);
	} else {
		if (bytes < 4) fail("give --shapes FILE or --bytes N");
		j.n = 1;
		j.elems = malloc(sizeof *j.elems);
		j.elems[0] = bytes / 4;
	}
	if (j.n == 0) fail("the shapes file lists no tensor");
	for (size_t t = 0; t < j.n; t++) j.total += j.elems[t];
	j.data = malloc(j.total * 4);
	j.fbuf = malloc(j.fusion * 4);
	if (!j.data || !j.fbuf) fail("out of memory");
	for (size_t e = 0; e < j.total; e++) j.data[e] = 0.0f;
	char *list = strdup(modes);
	for (char *m = strtok(list, ","); m; m = strtok(NULL, ",")) {
		if (strcmp(m, "whole") && strcmp(m, "per-tensor") && strcmp(m, "fused")) fail("modes are whole, per-tensor and fused");
		measure(&j, m, iters, warmup, rank, size);
	}
	MPI_Finalize();
	return 0;
}
