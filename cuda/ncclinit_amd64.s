//go:build linux && !nogpu

#include "textflag.h"

// ncclInitByValue is called with the C ABI (by purego, on the system
// stack): DI = ncclCommInitRank, SI = ncclComm_t *, DX = nranks,
// CX = ncclUniqueId * (128 bytes), R8 = rank. It copies the id into its own
// frame, at the stack pointer, where the System V ABI puts a by-value
// argument of class MEMORY, and calls ncclCommInitRank(comm, nranks, id,
// rank): comm, nranks and rank take DI, SI and DX (a MEMORY argument uses
// no register). The stack stays 16-byte aligned at the call.
GLOBL ·ncclInitByValueABI0(SB), NOPTR|RODATA, $8
DATA ·ncclInitByValueABI0(SB)/8, $ncclInitByValue<>(SB)
TEXT ncclInitByValue<>(SB), NOSPLIT|NOFRAME, $0
	PUSHQ BP
	MOVQ  SP, BP
	SUBQ  $128, SP
	MOVQ  DI, AX  // the function
	MOVQ  SI, R10 // comm
	MOVQ  DX, R11 // nranks
	MOVQ  CX, SI  // source: the id
	MOVQ  SP, DI  // destination: the argument area
	MOVQ  $16, CX
	CLD
	REP; MOVSQ
	MOVQ  R10, DI
	MOVQ  R11, SI
	MOVQ  R8, DX
	CALL  AX
	MOVQ  BP, SP
	POPQ  BP
	RET
