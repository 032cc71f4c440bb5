//go:build amd64 && !purego

#include "textflag.h"

// AVX2/F16C kernels for tensor.Reduce, tensor.Scale and the half-precision
// conversions. Register use: DI destination, SI source, CX elements left.
// Each loop runs a 4x (or 2x) unrolled body while enough elements remain,
// then a single body per block of 8 (float64: 4) elements; the Go caller
// passes a multiple of the block and finishes the tail itself.

// Elementwise combinations of A (dst) and B (src) into C, D a scratch.
// min/max follow Go's builtins: NaN propagates, -0 < +0. VMINPS returns its
// second source when either is NaN or both are zero, so OR-ing min(a,b) and
// min(b,a) gives -0 for a zero pair and a NaN when either is NaN. For max,
// AND-ing gives +0 for a zero pair; NaN is then restored from a+b.
#define ADD_PS(A, B, C, D) VADDPS B, A, C
#define MUL_PS(A, B, C, D) VMULPS B, A, C
#define MIN_PS(A, B, C, D) VMINPS B, A, C; VMINPS A, B, D; VORPS D, C, C
#define MAX_PS(A, B, C, D) VMAXPS B, A, C; VMAXPS A, B, D; VANDPS D, C, C; VCMPPS $3, B, A, D; VADDPS B, A, A; VBLENDVPS D, A, C, C
#define ADD_PD(A, B, C, D) VADDPD B, A, C
#define MUL_PD(A, B, C, D) VMULPD B, A, C
#define MIN_PD(A, B, C, D) VMINPD B, A, C; VMINPD A, B, D; VORPD D, C, C
#define MAX_PD(A, B, C, D) VMAXPD B, A, C; VMAXPD A, B, D; VANDPD D, C, C; VCMPPD $3, B, A, D; VADDPD B, A, A; VBLENDVPD D, A, C, C

// BF16ROUND rounds the 8 float32 in C to bfloat16 (nearest even; NaN is
// quieted) and packs them into the low 128 bits XD of D. Needs Y12 = 0x7fff,
// Y13 = 1, Y14 = 0x00400000 in every dword.
#define BF16ROUND(A, B, C, D, XA, XD) \
	VPSRLD $16, C, D; \
	VPAND Y13, D, D; \
	VPADDD C, D, D; \
	VPADDD Y12, D, D; \
	VCMPPS $3, C, C, A; \
	VPOR Y14, C, B; \
	VBLENDVPS A, B, D, D; \
	VPSRLD $16, D, D; \
	VEXTRACTI128 $1, D, XA; \
	VPACKUSDW XA, XD, XD

// Bodies: one block of 8 (float64: 4) elements at byte offsets doff/soff.
#define F32(OP, doff, soff, A, B, C, D, XA, XD) VMOVUPS doff(DI), A; VMOVUPS soff(SI), B; OP(A, B, C, D); VMOVUPS C, doff(DI)
#define F64(OP, doff, soff, A, B, C, D, XA, XD) VMOVUPD doff(DI), A; VMOVUPD soff(SI), B; OP(A, B, C, D); VMOVUPD C, doff(DI)
#define F16(OP, doff, soff, A, B, C, D, XA, XD) VCVTPH2PS doff(DI), A; VCVTPH2PS soff(SI), B; OP(A, B, C, D); VCVTPS2PH $0, C, doff(DI)
#define BF16LOAD(off, R, A) VPMOVZXWD off(R), A; VPSLLD $16, A, A
#define BF16(OP, doff, soff, A, B, C, D, XA, XD) BF16LOAD(doff, DI, A); BF16LOAD(soff, SI, B); OP(A, B, C, D); BF16ROUND(A, B, C, D, XA, XD); VMOVDQU XD, doff(DI)

// Scaling by the factor broadcast in Y15.
#define SF32(OP, doff, soff, A, B, C, D, XA, XD) VMULPS doff(DI), Y15, A; VMOVUPS A, doff(DI)
#define SF64(OP, doff, soff, A, B, C, D, XA, XD) VMULPD doff(DI), Y15, A; VMOVUPD A, doff(DI)
#define SF16(OP, doff, soff, A, B, C, D, XA, XD) VCVTPH2PS doff(DI), A; VMULPS Y15, A, A; VCVTPS2PH $0, A, doff(DI)
#define SBF16(OP, doff, soff, A, B, C, D, XA, XD) BF16LOAD(doff, DI, A); VMULPS Y15, A, C; BF16ROUND(A, B, C, D, XA, XD); VMOVDQU XD, doff(DI)

// Conversions from SI into DI.
#define CF16F32(OP, doff, soff, A, B, C, D, XA, XD) VCVTPH2PS soff(SI), A; VMOVUPS A, doff(DI)
#define CF32F16(OP, doff, soff, A, B, C, D, XA, XD) VMOVUPS soff(SI), A; VCVTPS2PH $0, A, doff(DI)
#define CBF16F32(OP, doff, soff, A, B, C, D, XA, XD) BF16LOAD(soff, SI, A); VMOVUPS A, doff(DI)
#define CF32BF16(OP, doff, soff, A, B, C, D, XA, XD) VMOVUPS soff(SI), C; BF16ROUND(A, B, C, D, XA, XD); VMOVDQU XD, doff(DI)

#define UNR1(BODY, OP) BODY(OP, 0, 0, Y0, Y1, Y2, Y3, X0, X3)
#define UNR2(BODY, OP, d1, s1) UNR1(BODY, OP); BODY(OP, d1, s1, Y4, Y5, Y6, Y7, X4, X7)
#define UNR4(BODY, OP, d1, s1, d2, s2, d3, s3) UNR2(BODY, OP, d1, s1); BODY(OP, d2, s2, Y8, Y9, Y10, Y11, X8, X11); BODY(OP, d3, s3, Y12, Y13, Y14, Y15, X12, X15)

// LOOP runs BODYN over N elements (DN, SN bytes) at a time, then BODY1 over
// N1 elements (D1, S1 bytes) at a time.
#define LOOP(BODYN, N, DN, SN, BODY1, N1, D1, S1) \
loopn: \
	CMPQ CX, $N; \
	JB loop1; \
	BODYN; \
	ADDQ $DN, DI; \
	ADDQ $SN, SI; \
	SUBQ $N, CX; \
	JMP loopn; \
loop1: \
	CMPQ CX, $N1; \
	JB done; \
	BODY1; \
	ADDQ $D1, DI; \
	ADDQ $S1, SI; \
	SUBQ $N1, CX; \
	JMP loop1; \
done: \
	VZEROUPPER; \
	RET

#define ARGS2 MOVQ dst+0(FP), DI; MOVQ src+8(FP), SI; MOVQ n+16(FP), CX
#define ARGS1 MOVQ dst+0(FP), DI; MOVQ n+8(FP), CX; XORQ SI, SI

DATA bf16rnd<>+0(SB)/4, $0x00007fff
GLOBL bf16rnd<>(SB), RODATA|NOPTR, $4
DATA bf16one<>+0(SB)/4, $0x00000001
GLOBL bf16one<>(SB), RODATA|NOPTR, $4
DATA bf16qnan<>+0(SB)/4, $0x00400000
GLOBL bf16qnan<>(SB), RODATA|NOPTR, $4

// float32: 32 elements (128 bytes) per unrolled step.
#define BINF32(OP) ARGS2; LOOP(UNR4(F32, OP, 32, 32, 64, 64, 96, 96), 32, 128, 128, UNR1(F32, OP), 8, 32, 32)

// func addF32(dst, src *float32, n int)
TEXT ·addF32(SB), NOSPLIT, $0-24
	BINF32(ADD_PS)

// func mulF32(dst, src *float32, n int)
TEXT ·mulF32(SB), NOSPLIT, $0-24
	BINF32(MUL_PS)

// func minF32(dst, src *float32, n int)
TEXT ·minF32(SB), NOSPLIT, $0-24
	BINF32(MIN_PS)

// func maxF32(dst, src *float32, n int)
TEXT ·maxF32(SB), NOSPLIT, $0-24
	BINF32(MAX_PS)

// func scalF32(dst *float32, n int, f float32)
TEXT ·scalF32(SB), NOSPLIT, $0-20
	ARGS1
	VBROADCASTSS f+16(FP), Y15
	LOOP(UNR4(SF32, none, 32, 0, 64, 0, 96, 0), 32, 128, 0, UNR1(SF32, none), 8, 32, 0)

// float64: 16 elements (128 bytes) per unrolled step, blocks of 4.
#define BINF64(OP) ARGS2; LOOP(UNR4(F64, OP, 32, 32, 64, 64, 96, 96), 16, 128, 128, UNR1(F64, OP), 4, 32, 32)

// func addF64(dst, src *float64, n int)
TEXT ·addF64(SB), NOSPLIT, $0-24
	BINF64(ADD_PD)

// func mulF64(dst, src *float64, n int)
TEXT ·mulF64(SB), NOSPLIT, $0-24
	BINF64(MUL_PD)

// func minF64(dst, src *float64, n int)
TEXT ·minF64(SB), NOSPLIT, $0-24
	BINF64(MIN_PD)

// func maxF64(dst, src *float64, n int)
TEXT ·maxF64(SB), NOSPLIT, $0-24
	BINF64(MAX_PD)

// func scalF64(dst *float64, n int, f float64)
TEXT ·scalF64(SB), NOSPLIT, $0-24
	ARGS1
	VBROADCASTSD f+16(FP), Y15
	LOOP(UNR4(SF64, none, 32, 0, 64, 0, 96, 0), 16, 128, 0, UNR1(SF64, none), 4, 32, 0)

// float16 through float32: 32 elements (64 bytes) per unrolled step.
#define BINF16(OP) ARGS2; LOOP(UNR4(F16, OP, 16, 16, 32, 32, 48, 48), 32, 64, 64, UNR1(F16, OP), 8, 16, 16)

// func addF16(dst, src *uint16, n int)
TEXT ·addF16(SB), NOSPLIT, $0-24
	BINF16(ADD_PS)

// func mulF16(dst, src *uint16, n int)
TEXT ·mulF16(SB), NOSPLIT, $0-24
	BINF16(MUL_PS)

// func minF16(dst, src *uint16, n int)
TEXT ·minF16(SB), NOSPLIT, $0-24
	BINF16(MIN_PS)

// func maxF16(dst, src *uint16, n int)
TEXT ·maxF16(SB), NOSPLIT, $0-24
	BINF16(MAX_PS)

// func scalF16(dst *uint16, n int, f float32)
TEXT ·scalF16(SB), NOSPLIT, $0-20
	ARGS1
	VBROADCASTSS f+16(FP), Y15
	LOOP(UNR4(SF16, none, 16, 0, 32, 0, 48, 0), 32, 64, 0, UNR1(SF16, none), 8, 16, 0)

// bfloat16 through float32: 16 elements (32 bytes) per unrolled step; Y12-Y14
// hold the rounding constants, loaded by each function (the assembler does not
// expand static symbols inside macros).
#define BINBF16(OP) ARGS2; LOOP(UNR2(BF16, OP, 16, 16), 16, 32, 32, UNR1(BF16, OP), 8, 16, 16)

// func addBF16(dst, src *uint16, n int)
TEXT ·addBF16(SB), NOSPLIT, $0-24
	VPBROADCASTD bf16rnd<>(SB), Y12
	VPBROADCASTD bf16one<>(SB), Y13
	VPBROADCASTD bf16qnan<>(SB), Y14
	BINBF16(ADD_PS)

// func mulBF16(dst, src *uint16, n int)
TEXT ·mulBF16(SB), NOSPLIT, $0-24
	VPBROADCASTD bf16rnd<>(SB), Y12
	VPBROADCASTD bf16one<>(SB), Y13
	VPBROADCASTD bf16qnan<>(SB), Y14
	BINBF16(MUL_PS)

// func minBF16(dst, src *uint16, n int)
TEXT ·minBF16(SB), NOSPLIT, $0-24
	VPBROADCASTD bf16rnd<>(SB), Y12
	VPBROADCASTD bf16one<>(SB), Y13
	VPBROADCASTD bf16qnan<>(SB), Y14
	BINBF16(MIN_PS)

// func maxBF16(dst, src *uint16, n int)
TEXT ·maxBF16(SB), NOSPLIT, $0-24
	VPBROADCASTD bf16rnd<>(SB), Y12
	VPBROADCASTD bf16one<>(SB), Y13
	VPBROADCASTD bf16qnan<>(SB), Y14
	BINBF16(MAX_PS)

// func scalBF16(dst *uint16, n int, f float32)
TEXT ·scalBF16(SB), NOSPLIT, $0-20
	ARGS1
	VPBROADCASTD bf16rnd<>(SB), Y12
	VPBROADCASTD bf16one<>(SB), Y13
	VPBROADCASTD bf16qnan<>(SB), Y14
	VBROADCASTSS f+16(FP), Y15
	LOOP(UNR2(SBF16, none, 16, 0), 16, 32, 0, UNR1(SBF16, none), 8, 16, 0)

// func cvtF16F32(dst *float32, src *uint16, n int)
TEXT ·cvtF16F32(SB), NOSPLIT, $0-24
	ARGS2
	LOOP(UNR4(CF16F32, none, 32, 16, 64, 32, 96, 48), 32, 128, 64, UNR1(CF16F32, none), 8, 32, 16)

// func cvtF32F16(dst *uint16, src *float32, n int)
TEXT ·cvtF32F16(SB), NOSPLIT, $0-24
	ARGS2
	LOOP(UNR4(CF32F16, none, 16, 32, 32, 64, 48, 96), 32, 64, 128, UNR1(CF32F16, none), 8, 16, 32)

// func cvtBF16F32(dst *float32, src *uint16, n int)
TEXT ·cvtBF16F32(SB), NOSPLIT, $0-24
	ARGS2
	LOOP(UNR4(CBF16F32, none, 32, 16, 64, 32, 96, 48), 32, 128, 64, UNR1(CBF16F32, none), 8, 32, 16)

// func cvtF32BF16(dst *uint16, src *float32, n int)
TEXT ·cvtF32BF16(SB), NOSPLIT, $0-24
	ARGS2
	VPBROADCASTD bf16rnd<>(SB), Y12
	VPBROADCASTD bf16one<>(SB), Y13
	VPBROADCASTD bf16qnan<>(SB), Y14
	LOOP(UNR2(CF32BF16, none, 16, 32), 16, 32, 64, UNR1(CF32BF16, none), 8, 16, 32)

// func cpuid(eax, ecx uint32) (a, b, c, d uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eax+0(FP), AX
	MOVL ecx+4(FP), CX
	CPUID
	MOVL AX, a+8(FP)
	MOVL BX, b+12(FP)
	MOVL CX, c+16(FP)
	MOVL DX, d+20(FP)
	RET

// func xgetbv0() uint32
TEXT ·xgetbv0(SB), NOSPLIT, $0-4
	MOVL $0, CX
	XGETBV
	MOVL AX, ret+0(FP)
	RET

// Integers: byte-counted loops (n is a multiple of 32 bytes), 128 bytes per
// unrolled step. Wrapping add, low-half multiply, signed or unsigned min/max
// and the bitwise ops, each one instruction.
#define INT(OP, doff, soff, A, B, C, D, XA, XD) VMOVDQU doff(DI), A; VMOVDQU soff(SI), B; OP B, A, C; VMOVDQU C, doff(DI)
#define BININT(OP) ARGS2; LOOP(UNR4(INT, OP, 32, 32, 64, 64, 96, 96), 128, 128, 128, UNR1(INT, OP), 32, 32, 32)

// func addI8(dst, src *byte, n int)
TEXT ·addI8(SB), NOSPLIT, $0-24
	BININT(VPADDB)

// func addI32(dst, src *byte, n int)
TEXT ·addI32(SB), NOSPLIT, $0-24
	BININT(VPADDD)

// func addI64(dst, src *byte, n int)
TEXT ·addI64(SB), NOSPLIT, $0-24
	BININT(VPADDQ)

// func mulI32(dst, src *byte, n int)
TEXT ·mulI32(SB), NOSPLIT, $0-24
	BININT(VPMULLD)

// func minI8(dst, src *byte, n int)
TEXT ·minI8(SB), NOSPLIT, $0-24
	BININT(VPMINSB)

// func maxI8(dst, src *byte, n int)
TEXT ·maxI8(SB), NOSPLIT, $0-24
	BININT(VPMAXSB)

// func minU8(dst, src *byte, n int)
TEXT ·minU8(SB), NOSPLIT, $0-24
	BININT(VPMINUB)

// func maxU8(dst, src *byte, n int)
TEXT ·maxU8(SB), NOSPLIT, $0-24
	BININT(VPMAXUB)

// func minI32(dst, src *byte, n int)
TEXT ·minI32(SB), NOSPLIT, $0-24
	BININT(VPMINSD)

// func maxI32(dst, src *byte, n int)
TEXT ·maxI32(SB), NOSPLIT, $0-24
	BININT(VPMAXSD)

// func addI16(dst, src *byte, n int)
TEXT ·addI16(SB), NOSPLIT, $0-24
	BININT(VPADDW)

// func mulI16(dst, src *byte, n int)
TEXT ·mulI16(SB), NOSPLIT, $0-24
	BININT(VPMULLW)

// func minI16(dst, src *byte, n int)
TEXT ·minI16(SB), NOSPLIT, $0-24
	BININT(VPMINSW)

// func maxI16(dst, src *byte, n int)
TEXT ·maxI16(SB), NOSPLIT, $0-24
	BININT(VPMAXSW)

// func minU16(dst, src *byte, n int)
TEXT ·minU16(SB), NOSPLIT, $0-24
	BININT(VPMINUW)

// func maxU16(dst, src *byte, n int)
TEXT ·maxU16(SB), NOSPLIT, $0-24
	BININT(VPMAXUW)

// func andBytes(dst, src *byte, n int)
TEXT ·andBytes(SB), NOSPLIT, $0-24
	BININT(VPAND)

// func orBytes(dst, src *byte, n int)
TEXT ·orBytes(SB), NOSPLIT, $0-24
	BININT(VPOR)
