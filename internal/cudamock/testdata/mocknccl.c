// A stand-in for libnccl, built by the tests (internal/cudamock). It supports
// communicators of one rank: collectives copy send to receive, and grouped
// sends to self are matched with receives from self at ncclGroupEnd. Group
// state is per thread, as in NCCL.
#include <stdint.h>
#include <string.h>
#include <stdlib.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef struct { int nranks, rank, dev; } comm;

static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
static __thread int depth;
static __thread struct { const void *b; size_t n; } sends[64];
static __thread struct { void *b; size_t n; } recvs[64];
static __thread int nsend, nrecv;

// mockSource: as in mockcudart.c, the sources' SHA-256 it was built from.
#ifndef MOCK_SOURCE
#define MOCK_SOURCE "unstamped"
#endif
const char *mockSource(void) { return MOCK_SOURCE; }

int ncclGetVersion(int *v) { *v = 22105; return 0; }
// Every byte of the id is set, so that ncclCommInitRank sees whether the
// caller passed all 128 bytes by value, in order (the C ABI's business).
int ncclGetUniqueId(ncclUniqueId *id) {
	for (int i = 0; i < 128; i++) id->internal[i] = (char)(i * 7 + 3);
	memcpy(id->internal, "MOCK", 4);
	id->internal[127] = 'Z';
	return 0;
}
int ncclCommInitRank(void **c, int nranks, ncclUniqueId id, int rank) {
	if (memcmp(id.internal, "MOCK", 4) != 0 || id.internal[127] != 'Z') return 4;
	for (int i = 4; i < 127; i++)
		if (id.internal[i] != (char)(i * 7 + 3)) return 4;
	if (nranks != 1 || rank != 0) return 5;
	comm *m = calloc(1, sizeof *m);
	m->nranks = nranks;
	*c = m;
	return 0;
}
int ncclCommDestroy(void *c) { free(c); return 0; }
int ncclCommAbort(void *c) { free(c); return 0; }
int ncclCommCount(void *c, int *n) { *n = ((comm *)c)->nranks; return 0; }
int ncclCommCuDevice(void *c, int *d) { *d = 0; return 0; }
int ncclCommUserRank(void *c, int *r) { *r = 0; return 0; }
int ncclCommGetAsyncError(void *c, int *e) { *e = 0; return 0; }
const char *ncclGetErrorString(int e) {
	switch (e) {
	case 0: return "no error";
	case 4: return "invalid argument";
	case 5: return "invalid usage";
	}
	return "unknown result code";
}
const char *ncclGetLastError(void *c) { return "mock: last error detail"; }

static int bytes(size_t count, int dt, size_t *n) {
	if (dt < 0 || dt > 9) return 4;
	*n = count * sizes[dt];
	return 0;
}

int ncclAllReduce(const void *s, void *r, size_t count, int dt, int op, void *c, void *st) {
	size_t n;
	if (bytes(count, dt, &n) || op < 0 || op > 4) return 4;
	memmove(r, s, n);
	return 0;
}
int ncclBroadcast(const void *s, void *r, size_t count, int dt, int root, void *c, void *st) {
	size_t n;
	if (bytes(count, dt, &n) || root != 0) return 4;
	memmove(r, s, n);
	return 0;
}
int ncclReduce(const void *s, void *r, size_t count, int dt, int op, int root, void *c, void *st) {
	return ncclAllReduce(s, r, count, dt, op, c, st);
}
int ncclAllGather(const void *s, void *r, size_t count, int dt, void *c, void *st) {
	size_t n;
	if (bytes(count, dt, &n)) return 4;
	memmove(r, s, n);
	return 0;
}
int ncclReduceScatter(const void *s, void *r, size_t count, int dt, int op, void *c, void *st) {
	return ncclAllReduce(s, r, count, dt, op, c, st);
}
int ncclSend(const void *b, size_t count, int dt, int peer, void *c, void *st) {
	size_t n;
	if (bytes(count, dt, &n) || peer != 0 || nsend == 64) return 4;
	if (depth == 0) return 5; // a lone send to self would deadlock
	sends[nsend].b = b; sends[nsend].n = n; nsend++;
	return 0;
}
int ncclRecv(void *b, size_t count, int dt, int peer, void *c, void *st) {
	size_t n;
	if (bytes(count, dt, &n) || peer != 0 || nrecv == 64) return 4;
	if (depth == 0) return 5;
	recvs[nrecv].b = b; recvs[nrecv].n = n; nrecv++;
	return 0;
}
int ncclGroupStart(void) { depth++; return 0; }
int ncclGroupEnd(void) {
	if (depth == 0) return 5;
	if (--depth > 0) return 0;
	int bad = nsend != nrecv;
	for (int i = 0; !bad && i < nsend; i++) {
		if (sends[i].n != recvs[i].n) bad = 1;
		else memmove(recvs[i].b, sends[i].b, sends[i].n);
	}
	nsend = nrecv = 0;
	return bad ? 5 : 0;
}
