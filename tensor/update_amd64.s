//go:build amd64 && !purego

#include "textflag.h"

// AVX2 optimizer kernels (see update_amd64.go). Register use: DI v, SI g,
// DX momentum buffer, m or Adagrad sum, R8 s, CX elements left (a multiple of 8), AX the
// hyper-parameters, broadcast into Y8-Y15. One block of 8 elements per
// iteration: the loops are bound by memory bandwidth, not by issue.
// Operand order follows the Go loops exactly (VSUBPS B, A, C is C = A - B).

#define UPDLOOP \
loop: \
	CMPQ CX, $8; \
	JB done; \
	BODY; \
	ADV; \
	SUBQ $8, CX; \
	JMP loop; \
done: \
	VZEROUPPER; \
	RET

// SGD without momentum: v = v - lr·(g + wd·v). Y15 lr, Y12 wd.
#define SGDPLAIN \
	VMOVUPS 0(DI), Y0; \
	VMULPS Y12, Y0, Y1; \
	VADDPS 0(SI), Y1, Y1; \
	VMULPS Y15, Y1, Y1; \
	VSUBPS Y1, Y0, Y0; \
	VMOVUPS Y0, 0(DI)

// gj = g + wd·v into Y1 (v in Y0). Y12 wd.
#define SGDGRAD VMOVUPS 0(DI), Y0; VMULPS Y12, Y0, Y1; VADDPS 0(SI), Y1, Y1
// b = μ·b + (1-dampening)·gj into Y2 and memory. Y14 μ, Y13 1-dampening.
#define SGDBUF VMULPS 0(DX), Y14, Y2; VMULPS Y13, Y1, Y3; VADDPS Y3, Y2, Y2; VMOVUPS Y2, 0(DX)
// b = gj (first step).
#define SGDBUF1 VMOVAPS Y1, Y2; VMOVUPS Y2, 0(DX)
// v = v - lr·gj, gj = b (plain momentum) or gj + μ·b (Nesterov).
#define SGDMOM VMULPS Y15, Y2, Y3; VSUBPS Y3, Y0, Y0; VMOVUPS Y0, 0(DI)
#define SGDNES VMULPS Y14, Y2, Y3; VADDPS Y3, Y1, Y1; VMULPS Y15, Y1, Y3; VSUBPS Y3, Y0, Y0; VMOVUPS Y0, 0(DI)

#define ADV2 ADDQ $32, DI; ADDQ $32, SI
#define ADV3 ADDQ $32, DI; ADDQ $32, SI; ADDQ $32, DX
#define ADV4 ADDQ $32, DI; ADDQ $32, SI; ADDQ $32, DX; ADDQ $32, R8

#define SGDARGS \
	MOVQ v+0(FP), DI; \
	MOVQ grad+8(FP), SI; \
	MOVQ b+16(FP), DX; \
	MOVQ n+24(FP), CX; \
	MOVQ c+32(FP), AX; \
	VBROADCASTSS 0(AX), Y15; \
	VBROADCASTSS 4(AX), Y14; \
	VBROADCASTSS 8(AX), Y13; \
	VBROADCASTSS 12(AX), Y12

// Adam. Y15 wd (Adam) or 1-lr·wd (AdamW), Y14 β1, Y13 1-β1, Y12 β2,
// Y11 1-β2, Y10 step size, Y9 sqrt(1-β2^t), Y8 eps.
#define ADAMARGS \
	MOVQ v+0(FP), DI; \
	MOVQ grad+8(FP), SI; \
	MOVQ m+16(FP), DX; \
	MOVQ s+24(FP), R8; \
	MOVQ n+32(FP), CX; \
	MOVQ c+40(FP), AX; \
	VBROADCASTSS 0(AX), Y15; \
	VBROADCASTSS 4(AX), Y14; \
	VBROADCASTSS 8(AX), Y13; \
	VBROADCASTSS 12(AX), Y12; \
	VBROADCASTSS 16(AX), Y11; \
	VBROADCASTSS 20(AX), Y10; \
	VBROADCASTSS 24(AX), Y9; \
	VBROADCASTSS 28(AX), Y8

// v in Y0, gj in Y1.
#define ADAMLOAD VMOVUPS 0(DI), Y0; VMOVUPS 0(SI), Y1
#define ADAML2 VMULPS Y15, Y0, Y2; VADDPS Y2, Y1, Y1
#define ADAMDECAY VMULPS Y15, Y0, Y0
// m = β1·m + (1-β1)·gj; s = β2·s + (1-β2)·gj·gj;
// v = v - (step·m) / (sqrt(s)/sqrt(1-β2^t) + eps).
#define ADAMUPD \
	VMULPS 0(DX), Y14, Y2; \
	VMULPS Y13, Y1, Y3; \
	VADDPS Y3, Y2, Y2; \
	VMOVUPS Y2, 0(DX); \
	VMULPS 0(R8), Y12, Y3; \
	VMULPS Y11, Y1, Y4; \
	VMULPS Y1, Y4, Y4; \
	VADDPS Y4, Y3, Y3; \
	VMOVUPS Y3, 0(R8); \
	VSQRTPS Y3, Y3; \
	VDIVPS Y9, Y3, Y3; \
	VADDPS Y8, Y3, Y3; \
	VMULPS Y10, Y2, Y2; \
	VDIVPS Y3, Y2, Y2; \
	VSUBPS Y2, Y0, Y0; \
	VMOVUPS Y0, 0(DI)

// Adagrad. Y15 clr, Y12 wd, Y8 eps. gj = g + wd·v; s = s + gj·gj;
// v = v - (clr·gj) / (sqrt(s) + eps).
#define ADAGRAD \
	VMOVUPS 0(DI), Y0; \
	VMULPS Y12, Y0, Y1; \
	VADDPS 0(SI), Y1, Y1; \
	VMULPS Y1, Y1, Y2; \
	VADDPS 0(DX), Y2, Y2; \
	VMOVUPS Y2, 0(DX); \
	VSQRTPS Y2, Y2; \
	VADDPS Y8, Y2, Y2; \
	VMULPS Y15, Y1, Y1; \
	VDIVPS Y2, Y1, Y1; \
	VSUBPS Y1, Y0, Y0; \
	VMOVUPS Y0, 0(DI)

// RMSProp. Y15 lr, Y14 α, Y13 1-α, Y12 wd, Y11 eps, Y10 μ; R8 momentum
// buffer, R9 gradient average (centered). gj = g + wd·v into Y1 (v in Y0),
// sq = α·sq + (1-α)·gj·gj into Y2.
#define RMSSQ \
	VMOVUPS 0(DI), Y0; \
	VMULPS Y12, Y0, Y1; \
	VADDPS 0(SI), Y1, Y1; \
	VMULPS 0(DX), Y14, Y2; \
	VMULPS Y13, Y1, Y3; \
	VMULPS Y1, Y3, Y3; \
	VADDPS Y3, Y2, Y2; \
	VMOVUPS Y2, 0(DX)
// avg = α·avg + (1-α)·gj; Y2 = sq - avg·avg.
#define RMSCEN \
	VMULPS 0(R9), Y14, Y3; \
	VMULPS Y13, Y1, Y4; \
	VADDPS Y4, Y3, Y3; \
	VMOVUPS Y3, 0(R9); \
	VMULPS Y3, Y3, Y3; \
	VSUBPS Y3, Y2, Y2
// d = sqrt(Y2) + eps into Y2.
#define RMSD VSQRTPS Y2, Y2; VADDPS Y11, Y2, Y2
// v = v - (lr·gj)/d.
#define RMSUPD VMULPS Y15, Y1, Y3; VDIVPS Y2, Y3, Y3; VSUBPS Y3, Y0, Y0; VMOVUPS Y0, 0(DI)
// mom = μ·mom + gj/d; v = v - lr·mom.
#define RMSMOMUPD \
	VDIVPS Y2, Y1, Y3; \
	VMULPS 0(R8), Y10, Y4; \
	VADDPS Y3, Y4, Y4; \
	VMOVUPS Y4, 0(R8); \
	VMULPS Y15, Y4, Y4; \
	VSUBPS Y4, Y0, Y0; \
	VMOVUPS Y0, 0(DI)
#define ADV5 ADDQ $32, DI; ADDQ $32, SI; ADDQ $32, DX; ADDQ $32, R8; ADDQ $32, R9
#define RMSARGS \
	MOVQ v+0(FP), DI; \
	MOVQ grad+8(FP), SI; \
	MOVQ sq+16(FP), DX; \
	MOVQ mom+24(FP), R8; \
	MOVQ avg+32(FP), R9; \
	MOVQ n+40(FP), CX; \
	MOVQ c+48(FP), AX; \
	VBROADCASTSS 0(AX), Y15; \
	VBROADCASTSS 4(AX), Y14; \
	VBROADCASTSS 8(AX), Y13; \
	VBROADCASTSS 12(AX), Y12; \
	VBROADCASTSS 16(AX), Y11; \
	VBROADCASTSS 20(AX), Y10

// func sgdPlainF32(v, grad *float32, n int, c *[2]float32)
TEXT ·sgdPlainF32(SB), NOSPLIT, $0-32
	MOVQ v+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ c+24(FP), AX
	VBROADCASTSS 0(AX), Y15
	VBROADCASTSS 4(AX), Y12
#define BODY SGDPLAIN
#define ADV ADV2
	UPDLOOP
#undef BODY
#undef ADV

// func sgdMomF32(v, grad, b *float32, n int, c *[4]float32)
TEXT ·sgdMomF32(SB), NOSPLIT, $0-40
	SGDARGS
#define BODY SGDGRAD; SGDBUF; SGDMOM
#define ADV ADV3
	UPDLOOP
#undef BODY
#undef ADV

// func sgdMomFirstF32(v, grad, b *float32, n int, c *[4]float32)
TEXT ·sgdMomFirstF32(SB), NOSPLIT, $0-40
	SGDARGS
#define BODY SGDGRAD; SGDBUF1; SGDMOM
#define ADV ADV3
	UPDLOOP
#undef BODY
#undef ADV

// func sgdNesF32(v, grad, b *float32, n int, c *[4]float32)
TEXT ·sgdNesF32(SB), NOSPLIT, $0-40
	SGDARGS
#define BODY SGDGRAD; SGDBUF; SGDNES
#define ADV ADV3
	UPDLOOP
#undef BODY
#undef ADV

// func sgdNesFirstF32(v, grad, b *float32, n int, c *[4]float32)
TEXT ·sgdNesFirstF32(SB), NOSPLIT, $0-40
	SGDARGS
#define BODY SGDGRAD; SGDBUF1; SGDNES
#define ADV ADV3
	UPDLOOP
#undef BODY
#undef ADV

// func adamF32(v, grad, m, s *float32, n int, c *[8]float32)
TEXT ·adamF32(SB), NOSPLIT, $0-48
	ADAMARGS
#define BODY ADAMLOAD; ADAML2; ADAMUPD
#define ADV ADV4
	UPDLOOP
#undef BODY
#undef ADV

// func adamWF32(v, grad, m, s *float32, n int, c *[8]float32)
TEXT ·adamWF32(SB), NOSPLIT, $0-48
	ADAMARGS
#define BODY ADAMLOAD; ADAMDECAY; ADAMUPD
#define ADV ADV4
	UPDLOOP
#undef BODY
#undef ADV

// func adagradF32(v, grad, s *float32, n int, c *[3]float32)
TEXT ·adagradF32(SB), NOSPLIT, $0-40
	MOVQ v+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ s+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ c+32(FP), AX
	VBROADCASTSS 0(AX), Y15
	VBROADCASTSS 4(AX), Y8
	VBROADCASTSS 8(AX), Y12
#define BODY ADAGRAD
#define ADV ADV3
	UPDLOOP
#undef BODY
#undef ADV

// func rmsF32(v, grad, sq, mom, avg *float32, n int, c *[6]float32)
TEXT ·rmsF32(SB), NOSPLIT, $0-56
	RMSARGS
#define BODY RMSSQ; RMSD; RMSUPD
#define ADV ADV5
	UPDLOOP
#undef BODY
#undef ADV

// func rmsCenF32(v, grad, sq, mom, avg *float32, n int, c *[6]float32)
TEXT ·rmsCenF32(SB), NOSPLIT, $0-56
	RMSARGS
#define BODY RMSSQ; RMSCEN; RMSD; RMSUPD
#define ADV ADV5
	UPDLOOP
#undef BODY
#undef ADV

// func rmsMomF32(v, grad, sq, mom, avg *float32, n int, c *[6]float32)
TEXT ·rmsMomF32(SB), NOSPLIT, $0-56
	RMSARGS
#define BODY RMSSQ; RMSD; RMSMOMUPD
#define ADV ADV5
	UPDLOOP
#undef BODY
#undef ADV

// func rmsCenMomF32(v, grad, sq, mom, avg *float32, n int, c *[6]float32)
TEXT ·rmsCenMomF32(SB), NOSPLIT, $0-56
	RMSARGS
#define BODY RMSSQ; RMSCEN; RMSD; RMSMOMUPD
#define ADV ADV5
	UPDLOOP
#undef BODY
#undef ADV
